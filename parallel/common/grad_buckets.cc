#include "parallel/common/grad_buckets.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/status/status.h"

namespace colossal::parallel {

std::vector<GradBucket> make_grad_buckets(const nn::ParameterTable& table, int64_t cap_bytes) {
  struct Open {
    GradBucket bucket;
    int64_t hi = 0;  // end (exclusive) of the open bucket's range
    int64_t lo = 0;  // offset of the last parameter added
  };
  std::vector<GradBucket> out;
  absl::flat_hash_map<int, Open> open;
  auto close = [&out](Open& o) {
    o.bucket.offset = o.lo;
    o.bucket.count = o.hi - o.lo;
    out.push_back(std::move(o.bucket));
    o.hi = o.lo;
    o.bucket = GradBucket{};
  };
  const std::vector<nn::ParameterEntry>& entries = table.entries();
  for (size_t i = entries.size(); i-- > 0;) {
    const nn::ParameterEntry& e = entries[i];
    const int key = static_cast<int>(e.dtype);
    auto it = open.find(key);
    if (it == open.end()) {
      Open o;
      o.hi = table.buffer_numel(e.dtype);
      it = open.emplace(key, std::move(o)).first;
    }
    Open& o = it->second;
    const int64_t dsize = static_cast<int64_t>(core::dtype_size(e.dtype));
    if (!o.bucket.params.empty() && (o.hi - e.offset) * dsize > cap_bytes) close(o);
    o.bucket.dtype = e.dtype;
    o.bucket.params.push_back(e.name);
    o.lo = e.offset;
  }
  for (core::DType dtype : table.dtypes()) {
    auto it = open.find(static_cast<int>(dtype));
    if (it != open.end() && !it->second.bucket.params.empty()) close(it->second);
  }
  return out;
}

namespace {

// The names `module` and its descendants declare.
absl::StatusOr<absl::flat_hash_set<std::string>> subtree_names(nn::Module& module) {
  nn::ParameterTable table;
  COLOSSAL_RETURN_IF_ERROR(module.declare(table));
  absl::flat_hash_set<std::string> names;
  for (const nn::ParameterEntry& e : table.entries()) names.insert(e.name);
  return names;
}

// Table entries declared by `module` itself, for every module of the tree.
absl::Status collect_owned(nn::Module& module, const nn::ParameterTable& table,
                           std::vector<std::pair<nn::Module*, std::vector<int>>>& out) {
  COLOSSAL_ASSIGN_OR_RETURN(absl::flat_hash_set<std::string> mine, subtree_names(module));
  for (nn::Module* child : module.children()) {
    COLOSSAL_ASSIGN_OR_RETURN(absl::flat_hash_set<std::string> theirs, subtree_names(*child));
    for (const std::string& n : theirs) mine.erase(n);
  }
  std::vector<int> own;
  for (const std::string& n : mine) {
    const nn::ParameterEntry* e = table.find(n);
    if (e == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(module.description(), " declares parameter \"", n,
                       "\" but the store has none of that name: pass the store made from "
                       "this model's table"));
    }
    own.push_back(static_cast<int>(e - table.entries().data()));
  }
  std::sort(own.begin(), own.end());  // table order, the same on every rank
  if (!own.empty()) out.emplace_back(&module, std::move(own));
  for (nn::Module* child : module.children()) {
    COLOSSAL_RETURN_IF_ERROR(collect_owned(*child, table, out));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::pair<nn::Module*, std::vector<int>>>> module_owned_parameters(
    nn::Module& model, const nn::ParameterTable& table) {
  std::vector<std::pair<nn::Module*, std::vector<int>>> owned;
  COLOSSAL_RETURN_IF_ERROR(collect_owned(model, table, owned));
  return owned;
}

absl::StatusOr<std::shared_ptr<BucketedGradReducer>> BucketedGradReducer::create(
    std::string who, nn::Module& model, const nn::ParameterStore& store,
    std::vector<GradBucket> buckets, Launch launch, bool overlap) {
  const nn::ParameterTable& table = store.table();
  COLOSSAL_ASSIGN_OR_RETURN(auto owned, module_owned_parameters(model, table));
  std::shared_ptr<BucketedGradReducer> r(new BucketedGradReducer());
  r->who_ = std::move(who);
  r->store_ = store;
  r->buckets_ = std::move(buckets);
  r->launch_ = std::move(launch);
  r->overlap_ = overlap;
  r->bucket_of_.assign(table.size(), -1);
  r->params_in_bucket_.assign(r->buckets_.size(), 0);
  for (size_t b = 0; b < r->buckets_.size(); ++b) {
    for (const std::string& n : r->buckets_[b].params) {
      r->bucket_of_[table.find(n) - table.entries().data()] = static_cast<int>(b);
      ++r->params_in_bucket_[b];
    }
  }
  std::weak_ptr<BucketedGradReducer> weak = r;
  for (auto& [module, own] : owned) {
    module->add_backward_hook(
        [weak, own = std::move(own)](nn::Module&, const core::Tensor&) -> absl::Status {
          std::shared_ptr<BucketedGradReducer> st = weak.lock();
          if (st == nullptr) return absl::OkStatus();
          return st->on_module_done(own);
        });
  }
  return r;
}

BucketedGradReducer::~BucketedGradReducer() {
  // The group may cancel unfinished work when destroyed; finish it first.
  wait_all(core::Stream::cpu()).IgnoreError();
}

void BucketedGradReducer::track(comm::WorkPtr work) { works_.push_back(std::move(work)); }

absl::Status BucketedGradReducer::wait_all(const core::Stream& stream) {
  absl::Status first;
  for (const comm::WorkPtr& w : works_) {
    absl::Status s = w->wait_on(stream);
    if (first.ok() && !s.ok()) first = s;
  }
  works_.clear();
  return first;
}

absl::Status BucketedGradReducer::launch_ready(bool in_hook) {
  while (next_launch_ < buckets_.size() && remaining_[next_launch_] == 0) {
    comm::CollectiveOptions o;
    if (input_stream_.has_value() && input_stream_->is_cuda()) o.stream = input_stream_;
    COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w, launch_(next_launch_, o));
    works_.push_back(std::move(w));
    ++issued_;
    if (in_hook) ++issued_in_hooks_;
    ++next_launch_;
  }
  return absl::OkStatus();
}

absl::Status BucketedGradReducer::mark_final(int entry) {
  if (final_[entry]) {
    return absl::FailedPreconditionError(absl::StrCat(
        who_, ": the gradient of ", store_.table().entries()[entry].name,
        " was finalised twice in one backward (did a module run twice in the forward?); "
        "its bucket is reduced once per backward"));
  }
  final_[entry] = 1;
  --remaining_[bucket_of_[entry]];
  return absl::OkStatus();
}

absl::Status BucketedGradReducer::on_module_done(const std::vector<int>& own) {
  if (!in_backward_ || !sync_) return absl::OkStatus();
  for (int e : own) COLOSSAL_RETURN_IF_ERROR(mark_final(e));
  if (!overlap_) return absl::OkStatus();  // end_backward launches them all
  return launch_ready(/*in_hook=*/true);
}

absl::Status BucketedGradReducer::begin_backward(const core::Stream& compute, bool sync) {
  // The previous backward's reductions write the buffer this backward adds to.
  input_stream_ = compute;
  COLOSSAL_RETURN_IF_ERROR(wait_all(compute));
  in_backward_ = true;
  sync_ = sync;
  remaining_ = params_in_bucket_;
  final_.assign(bucket_of_.size(), 0);
  next_launch_ = 0;
  return absl::OkStatus();
}

absl::Status BucketedGradReducer::end_backward(bool ok) {
  in_backward_ = false;
  if (!ok) return wait_all(core::Stream::cpu());
  if (!sync_) return absl::OkStatus();
  // Parameters this backward did not reach: final now.
  for (size_t e = 0; e < final_.size(); ++e) {
    if (!final_[e]) COLOSSAL_RETURN_IF_ERROR(mark_final(static_cast<int>(e)));
  }
  return launch_ready(/*in_hook=*/false);
}

}  // namespace colossal::parallel
