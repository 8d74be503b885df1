// DeviceMesh rank lists against Colossal-AI's ProcessGroupMesh numbering
// (C order, tp fastest), errors for impossible shapes, and real subgroups.
#include "comm/mesh/device_mesh.h"

#include <gtest/gtest.h>

#include <vector>

#include "comm/builtin/process_group_builtin.h"
#include "comm/testing/ranks.h"

namespace colossal::comm {
namespace {

using Groups = std::vector<std::vector<int>>;

TEST(DeviceMeshTest, HybridParallelOrderMatchesColossalAi) {
  // ProcessGroupMesh(dp=2, pp=2, tp=2): numpy unravel_index, tp fastest.
  auto mesh = DeviceMesh::hybrid_parallel(8, 5, /*pp=*/2, /*tp=*/2);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_EQ(mesh->dims(), (std::vector<int>{2, 2, 2}));
  EXPECT_EQ(mesh->names(), (std::vector<std::string>{"dp", "pp", "tp"}));
  EXPECT_EQ(mesh->groups_along(2), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));  // tp
  EXPECT_EQ(mesh->groups_along(1), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));  // pp
  EXPECT_EQ(mesh->groups_along(0), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));  // dp
  // Rank 5 = (dp 1, pp 0, tp 1).
  EXPECT_EQ(*mesh->coordinate("dp"), 1);
  EXPECT_EQ(*mesh->coordinate("pp"), 0);
  EXPECT_EQ(*mesh->coordinate("tp"), 1);
  EXPECT_EQ(*mesh->ranks_along("tp"), (std::vector<int>{4, 5}));
  EXPECT_EQ(*mesh->ranks_along("pp"), (std::vector<int>{5, 7}));
  EXPECT_EQ(*mesh->ranks_along("dp"), (std::vector<int>{1, 5}));
}

TEST(DeviceMeshTest, UnevenShapes) {
  // dp = 12 / (pp 3 * tp 2) = 2.
  auto mesh = DeviceMesh::hybrid_parallel(12, 7, 3, 2);
  ASSERT_TRUE(mesh.ok());
  EXPECT_EQ(*mesh->size("dp"), 2);
  EXPECT_EQ(mesh->groups_along(2), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}}));
  EXPECT_EQ(mesh->groups_along(1), (Groups{{0, 2, 4}, {1, 3, 5}, {6, 8, 10}, {7, 9, 11}}));
  EXPECT_EQ(mesh->groups_along(0), (Groups{{0, 6}, {1, 7}, {2, 8}, {3, 9}, {4, 10}, {5, 11}}));
  // Pure data parallel and pure tensor parallel degenerate cleanly.
  auto dp_only = DeviceMesh::hybrid_parallel(4, 0, 1, 1);
  ASSERT_TRUE(dp_only.ok());
  EXPECT_EQ(*dp_only->ranks_along("dp"), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(*dp_only->ranks_along("tp"), (std::vector<int>{0}));
  auto tp_only = DeviceMesh::hybrid_parallel(4, 2, 1, 4);
  ASSERT_TRUE(tp_only.ok());
  EXPECT_EQ(*tp_only->ranks_along("tp"), (std::vector<int>{0, 1, 2, 3}));
}

TEST(DeviceMeshTest, CoordinatesRoundTrip) {
  auto mesh = DeviceMesh::create(24, 0, {2, 3, 4}, {"a", "b", "c"});
  ASSERT_TRUE(mesh.ok());
  for (int r = 0; r < 24; ++r) {
    const std::vector<int> c = mesh->coordinates_of(r);
    EXPECT_EQ(mesh->rank_of(c), r);
    EXPECT_EQ(c[2], r % 4);
    EXPECT_EQ(c[0], r / 12);
  }
  // Every axis partitions the world.
  for (int a = 0; a < 3; ++a) {
    std::vector<int> seen(24, 0);
    for (const auto& g : mesh->groups_along(a)) {
      EXPECT_EQ(static_cast<int>(g.size()), mesh->dims()[a]);
      for (int r : g) ++seen[r];
    }
    EXPECT_EQ(seen, std::vector<int>(24, 1));
  }
}

TEST(DeviceMeshTest, Errors) {
  auto indivisible = DeviceMesh::hybrid_parallel(6, 0, 2, 2);
  EXPECT_TRUE(absl::IsInvalidArgument(indivisible.status()));
  EXPECT_NE(indivisible.status().message().find("not divisible by pp_size * tp_size = 2 * 2 = 4"),
            std::string::npos) << indivisible.status();
  auto wrong_product = DeviceMesh::create(8, 0, {2, 2}, {"dp", "tp"});
  EXPECT_NE(wrong_product.status().message().find("dp=2 x tp=2 = 4 ranks, but the world has 8"),
            std::string::npos) << wrong_product.status();
  EXPECT_TRUE(absl::IsInvalidArgument(DeviceMesh::create(4, 4, {4}, {"dp"}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(DeviceMesh::create(4, 0, {4, 1}, {"dp", "dp"}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(DeviceMesh::create(4, 0, {4}, {}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(DeviceMesh::create(0, 0, {0}, {"dp"}).status()));
  auto mesh = DeviceMesh::hybrid_parallel(4, 0, 1, 2);
  ASSERT_TRUE(mesh.ok());
  auto typo = mesh->axis("pt");
  EXPECT_TRUE(absl::IsInvalidArgument(typo.status()));
  EXPECT_NE(typo.status().message().find("did you mean"), std::string::npos) << typo.status();
  EXPECT_TRUE(absl::IsFailedPrecondition(mesh->group("tp").status()));
}

TEST(DeviceMeshTest, CreatesWorkingSubgroups) {
  constexpr int kWorld = 8;
  auto master = testing::loopback_store();
  testing::run_ranks(kWorld, [&](int rank) {
    auto store = testing::store_client(master->port());
    BuiltinOptions o;
    o.transport = TransportKind::kInproc;
    o.timeout = absl::Seconds(30);
    auto world = ProcessGroupBuiltin::create(store, rank, kWorld, o);
    ASSERT_TRUE(world.ok()) << world.status();
    auto mesh = DeviceMesh::hybrid_parallel(kWorld, rank, 2, 2);
    ASSERT_TRUE(mesh.ok());
    ASSERT_TRUE(mesh->create_groups(**world).ok());
    for (const char* axis : {"dp", "pp", "tp"}) {
      auto g = mesh->group(axis);
      ASSERT_TRUE(g.ok()) << g.status();
      const std::vector<int> members = *mesh->ranks_along(axis);
      EXPECT_EQ((*g)->world_ranks(), members);
      EXPECT_EQ((*g)->rank(), *mesh->coordinate(axis));
      // The sum of world ranks over the group shows its membership.
      int64_t x = rank;
      auto w = (*g)->all_reduce(Buffer::cpu(&x, 1), ReduceOp::kSum);
      ASSERT_TRUE(w.ok());
      ASSERT_TRUE((*w)->wait(absl::Seconds(30)).ok());
      int64_t want = 0;
      for (int m : members) want += m;
      EXPECT_EQ(x, want) << axis << " group of rank " << rank;
    }
    auto wrong = DeviceMesh::hybrid_parallel(4, 0, 1, 1);
    EXPECT_TRUE(absl::IsInvalidArgument(wrong->create_groups(**world)));
  });
}

}  // namespace
}  // namespace colossal::comm
