// Rank discovery from torchrun, Slurm and Open MPI variables, with the
// precedence, defaults and error messages comm/launch/env.h promises.
#include "comm/launch/env.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace colossal::comm {
namespace {

EnvLookup fake(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(EnvTest, NothingMeansOneProcess) {
  auto r = discover_rank(fake({}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->source, "default");
  EXPECT_EQ(r->rank, 0);
  EXPECT_EQ(r->world_size, 1);
  EXPECT_EQ(r->master_addr, "127.0.0.1");
  EXPECT_EQ(r->master_port, 29500);
}

TEST(EnvTest, Torchrun) {
  auto r = discover_rank(fake({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"},
                               {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "node7"},
                               {"MASTER_PORT", "1234"},
                               // Scheduler variables lose to torchrun's.
                               {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->source, "torchrun");
  EXPECT_EQ(r->rank, 5);
  EXPECT_EQ(r->local_rank, 1);
  EXPECT_EQ(r->world_size, 8);
  EXPECT_EQ(r->local_world_size, 4);
  EXPECT_EQ(r->master_addr, "node7");
  EXPECT_EQ(r->master_port, 1234);
}

TEST(EnvTest, Slurm) {
  auto r = discover_rank(fake({{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "2"},
                               {"SLURM_TASKS_PER_NODE", "4(x2)"}, {"SLURM_NODEID", "1"},
                               {"SLURM_JOB_NODELIST", "gpu-[007-008]"}}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->source, "slurm");
  EXPECT_EQ(r->rank, 6);
  EXPECT_EQ(r->local_rank, 2);
  EXPECT_EQ(r->world_size, 8);
  EXPECT_EQ(r->local_world_size, 4);
  EXPECT_EQ(r->master_addr, "gpu-007");
  EXPECT_EQ(r->master_port, 29500);
  // Uneven nodes, and MASTER_* overriding.
  auto u = discover_rank(fake({{"SLURM_PROCID", "7"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "0"},
                               {"SLURM_TASKS_PER_NODE", "2(x3),2"}, {"SLURM_NODEID", "3"},
                               {"SLURM_NODELIST", "a1,b2"}, {"MASTER_ADDR", "head"},
                               {"MASTER_PORT", "4000"}}));
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->local_world_size, 2);
  EXPECT_EQ(u->master_addr, "head");
  EXPECT_EQ(u->master_port, 4000);
  auto bad = discover_rank(fake({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"},
                                 {"SLURM_TASKS_PER_NODE", "two"}}));
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_NE(bad.status().message().find("SLURM_TASKS_PER_NODE='two'"), std::string::npos);
}

TEST(EnvTest, OpenMpi) {
  auto single = discover_rank(fake({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                                    {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_EQ(single->source, "openmpi");
  EXPECT_EQ(single->rank, 1);
  EXPECT_EQ(single->master_addr, "127.0.0.1");
  auto multi = discover_rank(fake({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
  EXPECT_TRUE(absl::IsInvalidArgument(multi.status()));
  EXPECT_NE(multi.status().message().find("set MASTER_ADDR"), std::string::npos) << multi.status();
  auto with_master = discover_rank(fake({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                         {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                         {"MASTER_ADDR", "host0"}}));
  ASSERT_TRUE(with_master.ok());
  EXPECT_EQ(with_master->master_addr, "host0");
  EXPECT_EQ(with_master->local_rank, 1);
}

TEST(EnvTest, ErrorsNameTheVariable) {
  auto not_int = discover_rank(fake({{"RANK", "x"}, {"WORLD_SIZE", "2"}}));
  EXPECT_NE(not_int.status().message().find("RANK='x' is not an integer"), std::string::npos)
      << not_int.status();
  auto too_big = discover_rank(fake({{"RANK", "4"}, {"WORLD_SIZE", "4"}}));
  EXPECT_NE(too_big.status().message().find("RANK=4 is not in [0, WORLD_SIZE=4)"), std::string::npos)
      << too_big.status();
  auto half = discover_rank(fake({{"RANK", "0"}}));
  EXPECT_NE(half.status().message().find("WORLD_SIZE is not"), std::string::npos) << half.status();
  auto port = discover_rank(fake({{"MASTER_PORT", "70000"}}));
  EXPECT_NE(port.status().message().find("MASTER_PORT=70000"), std::string::npos) << port.status();
  auto local = discover_rank(fake({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "3"},
                                   {"LOCAL_WORLD_SIZE", "2"}}));
  EXPECT_NE(local.status().message().find("LOCAL_RANK=3"), std::string::npos) << local.status();
}

TEST(EnvTest, FirstSlurmHost) {
  EXPECT_EQ(first_slurm_host("node01"), "node01");
  EXPECT_EQ(first_slurm_host("node[01-04,07],gpu5"), "node01");
  EXPECT_EQ(first_slurm_host("gpu-[003-010,012]"), "gpu-003");
  EXPECT_EQ(first_slurm_host("node[7,9]-ib"), "node7-ib");
  EXPECT_EQ(first_slurm_host("a[1-2]b[3-4]"), "a1b3");
  EXPECT_EQ(first_slurm_host("x,y"), "x");
}

TEST(EnvTest, ProcessEnvReadsGetenv) {
  setenv("COLOSSAL_ENV_TEST_VAR", "v", 1);
  EXPECT_EQ(process_env()("COLOSSAL_ENV_TEST_VAR"), "v");
  EXPECT_EQ(process_env()("COLOSSAL_ENV_TEST_UNSET_VAR"), std::nullopt);
}

TEST(EnvTest, JobId) {
  EXPECT_EQ(discover_rank(fake({}))->job_id, "");
  EXPECT_EQ(discover_rank(fake({{"COLOSSAL_JOB_ID", "abc"}, {"SLURM_JOB_ID", "7"}}))->job_id, "abc");
  EXPECT_EQ(discover_rank(fake({{"TORCHELASTIC_RUN_ID", "r1"}}))->job_id, "torchrun:r1");
  EXPECT_EQ(discover_rank(fake({{"TORCHELASTIC_RUN_ID", "none"}}))->job_id, "");  // torchrun's default
  EXPECT_EQ(discover_rank(fake({{"SLURM_JOB_ID", "7"}, {"SLURM_STEP_ID", "2"}}))->job_id, "slurm:7.2");
  EXPECT_EQ(discover_rank(fake({{"SLURM_JOB_ID", "7"}}))->job_id, "slurm:7");
}

}  // namespace
}  // namespace colossal::comm
