// Test helper of comm/builtin's multi-process tests (multiprocess_test,
// cuda_ipc_test): in a child started by testing::run_rank_processes
// (comm/testing/multiprocess.h), the rank's ProcessGroupBuiltin on the
// parent's store.
#ifndef COLOSSAL_COMM_BUILTIN_CHILD_GROUP_TESTING_H_
#define COLOSSAL_COMM_BUILTIN_CHILD_GROUP_TESTING_H_

#include <gtest/gtest.h>

#include <memory>

#include "comm/builtin/process_group_builtin.h"
#include "comm/testing/multiprocess.h"
#include "comm/testing/ranks.h"

namespace colossal::comm::testing {

// Connects to the parent's store on 127.0.0.1:c.port (within options.timeout)
// and creates rank c.rank of c.world with `options`; nullptr (a test failure)
// when either fails. `store_out`, when given, receives the store.
inline std::shared_ptr<ProcessGroup> child_builtin_group(const ChildRank& c,
                                                         const BuiltinOptions& options,
                                                         std::shared_ptr<Store>* store_out) {
  std::shared_ptr<Store> store = store_client(c.port, options.timeout);
  if (!store) return nullptr;
  auto pg = ProcessGroupBuiltin::create(store, c.rank, c.world, options);
  EXPECT_TRUE(pg.ok()) << pg.status();
  if (store_out) *store_out = store;
  return pg.ok() ? std::shared_ptr<ProcessGroup>(*pg) : nullptr;
}

}  // namespace colossal::comm::testing

#endif  // COLOSSAL_COMM_BUILTIN_CHILD_GROUP_TESTING_H_
