#include "comm/store/store.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"

namespace colossal::comm {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {}

std::string PrefixStore::full(absl::string_view key) const {
  return absl::StrCat(prefix_, "/", key);
}

std::vector<std::string> PrefixStore::full(absl::Span<const std::string> keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const std::string& k : keys) out.push_back(full(k));
  return out;
}

absl::Status PrefixStore::set(absl::string_view key, absl::string_view value) {
  return base_->set(full(key), value);
}
absl::StatusOr<std::string> PrefixStore::get(absl::string_view key) { return base_->get(full(key)); }
absl::StatusOr<int64_t> PrefixStore::add(absl::string_view key, int64_t delta) {
  return base_->add(full(key), delta);
}
absl::StatusOr<std::string> PrefixStore::compare_set(absl::string_view key,
                                                     absl::string_view expected,
                                                     absl::string_view desired) {
  return base_->compare_set(full(key), expected, desired);
}
absl::Status PrefixStore::wait(absl::Span<const std::string> keys, absl::Duration timeout) {
  return base_->wait(full(keys), timeout);
}
absl::StatusOr<bool> PrefixStore::check(absl::Span<const std::string> keys) {
  return base_->check(full(keys));
}
absl::StatusOr<bool> PrefixStore::delete_key(absl::string_view key) {
  return base_->delete_key(full(key));
}
absl::StatusOr<int64_t> PrefixStore::num_keys() { return base_->num_keys(); }
absl::Duration PrefixStore::timeout() const { return base_->timeout(); }
void PrefixStore::set_timeout(absl::Duration timeout) { base_->set_timeout(timeout); }
std::string PrefixStore::describe() const {
  return absl::StrCat(base_->describe(), " (prefix '", prefix_, "')");
}

absl::Status barrier(Store& store, absl::string_view name, int world_size, absl::Duration timeout) {
  const std::string arrived_key = absl::StrCat(name, "/arrived");
  const std::string done_key = absl::StrCat(name, "/done");
  COLOSSAL_ASSIGN_OR_RETURN(const int64_t arrived, store.add(arrived_key, 1));
  if (arrived == world_size) COLOSSAL_RETURN_IF_ERROR(store.set(done_key, "1"));
  const std::vector<std::string> keys = {done_key};
  absl::Status s = store.wait(keys, timeout);
  if (s.ok() || !absl::IsDeadlineExceeded(s)) return s;
  auto now = store.add(arrived_key, 0);
  return absl::DeadlineExceededError(absl::StrCat(
      "barrier '", name, "' on ", store.describe(), ": timed out after ",
      absl::FormatDuration(timeout), " with ", now.ok() ? absl::StrCat(*now) : "?", " of ",
      world_size, " ranks arrived"));
}

absl::StatusOr<ExchangeRound> exchange_round(Store& store, absl::string_view prefix, int64_t round,
                                             int rank, int size, absl::string_view value,
                                             absl::Duration timeout) {
  const auto key = [&](int64_t n, int r) { return absl::StrCat(prefix, n, "/", r); };
  COLOSSAL_RETURN_IF_ERROR(store.set(key(round, rank), value));
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(key(round, r));
  ExchangeRound out;
  const absl::Status waited = store.wait(keys, timeout);
  if (!waited.ok()) {
    for (int r = 0; r < size; ++r) {
      absl::StatusOr<bool> there = store.check({keys[r]});
      if (there.ok() && !*there) out.missing.push_back(r);
    }
    if (out.missing.empty()) return waited;
    return out;
  }
  for (const std::string& k : keys) {
    COLOSSAL_ASSIGN_OR_RETURN(std::string v, store.get(k));
    out.values.push_back(std::move(v));
  }
  if (round > 0) store.delete_key(key(round - 1, rank)).IgnoreError();
  return out;
}

}  // namespace colossal::comm
