#include "parallel/gemini/chunk_layout.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "core/dtype/dtype.h"

namespace colossal::parallel {
namespace {

constexpr double kMi = 1024.0 * 1024.0;

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// Greedy packing of `sizes` (aligned) into chunks of `size`; returns the waste,
// or -1 when a size does not fit at all.
int64_t waste_of(const std::vector<int64_t>& sizes, int64_t size) {
  int64_t waste = 0, used = 0;
  bool open = false;
  for (int64_t n : sizes) {
    if (n > size) return -1;
    if (!open || used + n > size) {
      if (open) waste += size - used;
      used = 0;
      open = true;
    }
    used += n;
  }
  if (open) waste += size - used;
  return waste;
}

}  // namespace

int64_t ChunkLayout::wasted() const {
  int64_t w = 0;
  for (const ChunkSpec& c : chunks) w += c.numel - c.used;
  return w;
}

int64_t ChunkLayout::total() const {
  int64_t t = 0;
  for (const ChunkSpec& c : chunks) t += c.numel;
  return t;
}

std::vector<size_t> table_order(const nn::ParameterTable& table) {
  std::vector<size_t> order(table.size());
  std::iota(order.begin(), order.end(), size_t{0});
  return order;
}

absl::StatusOr<ChunkLayout> plan_chunks(const nn::ParameterTable& table,
                                        const std::vector<size_t>& order,
                                        const ChunkSearchOptions& o) {
  if (o.world < 1 || o.hidden_dim < 1 || !(o.search_range_m >= 0) || !(o.min_chunk_size_m >= 0) ||
      o.align < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gemini chunks: world (", o.world, ") and hidden_dim (", o.hidden_dim,
        ") must be >= 1, search_range_m, min_chunk_size_m and align >= 0"));
  }
  if (table.dtypes().size() > 1) {
    return absl::InvalidArgumentError("gemini chunks: the model's parameters have several dtypes");
  }
  std::vector<char> seen(table.size(), 0);
  if (order.size() != table.size()) {
    return absl::InvalidArgumentError("gemini chunks: the order does not list every parameter once");
  }
  for (size_t i : order) {
    if (i >= table.size() || seen[i]) {
      return absl::InvalidArgumentError("gemini chunks: the order does not list every parameter once");
    }
    seen[i] = 1;
  }
  ChunkLayout layout;
  const int64_t esize =
      table.dtypes().empty() ? 4 : static_cast<int64_t>(core::dtype_size(table.dtypes()[0]));
  layout.align = o.align > 0 ? o.align : std::max<int64_t>(1, 16 / esize);
  const int64_t quantum = layout.align * o.world;
  layout.chunk_of.assign(table.size(), -1);
  layout.slot_of.assign(table.size(), -1);
  if (order.empty()) return layout;

  std::vector<int64_t> sizes;
  sizes.reserve(order.size());
  for (size_t i : order) sizes.push_back(round_up(table.entries()[i].numel(), layout.align));
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});

  // Appends parameter order[k] to chunk `c`.
  auto place = [&](int c, size_t k) {
    ChunkSpec& chunk = layout.chunks[c];
    layout.chunk_of[order[k]] = c;
    layout.slot_of[order[k]] = static_cast<int>(chunk.params.size());
    chunk.params.push_back(order[k]);
    chunk.offsets.push_back(chunk.used);
    chunk.used += sizes[k];
  };

  const int64_t min_chunk = static_cast<int64_t>(o.min_chunk_size_m * kMi);
  if (total < min_chunk) {  // small model: one chunk, kept whole
    layout.chunks.emplace_back();
    layout.chunks[0].keep_whole = true;
    for (size_t k = 0; k < order.size(); ++k) place(0, k);
    layout.chunks[0].numel = round_up(layout.chunks[0].used, quantum);
    layout.chunk_size = layout.chunks[0].numel;
    return layout;
  }

  // Outsized parameters: more than mean + 3 sigma.
  const double mean = static_cast<double>(total) / sizes.size();
  double var = 0;
  for (int64_t n : sizes) var += (n - mean) * (n - mean);
  const double limit = mean + 3.0 * std::sqrt(var / sizes.size());
  std::vector<char> outsized(order.size(), 0);
  std::vector<int64_t> packed;
  int64_t largest = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    outsized[k] = sizes.size() > 1 && static_cast<double>(sizes[k]) > limit;
    if (!outsized[k]) {
      packed.push_back(sizes[k]);
      largest = std::max(largest, sizes[k]);
    }
  }
  const int64_t first = round_up(std::max(largest, min_chunk), quantum);
  const int64_t last = first + static_cast<int64_t>(o.search_range_m * kMi);
  int64_t best = first, best_waste = -1;
  for (int64_t size = first; size <= last; size = round_up(size + o.hidden_dim, quantum)) {
    const int64_t w = waste_of(packed, size);
    if (w >= 0 && (best_waste < 0 || w < best_waste)) {
      best = size;
      best_waste = w;
    }
  }
  layout.chunk_size = best;

  int open = -1;  // index of the chunk being filled
  for (size_t k = 0; k < order.size(); ++k) {
    if (outsized[k]) {
      layout.chunks.emplace_back();
      layout.chunks.back().own = true;
      layout.chunks.back().numel = round_up(sizes[k], quantum);
      place(static_cast<int>(layout.chunks.size() - 1), k);
      continue;
    }
    if (open < 0 || layout.chunks[open].used + sizes[k] > best) {
      ChunkSpec c;
      c.numel = best;
      layout.chunks.push_back(std::move(c));
      open = static_cast<int>(layout.chunks.size() - 1);
    }
    place(open, k);
  }
  return layout;
}

}  // namespace colossal::parallel
