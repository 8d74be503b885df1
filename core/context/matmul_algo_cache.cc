#include "core/context/matmul_algo_cache.h"

namespace colossal::core {

const char* matmul_algo_library_name(MatmulAlgoLibrary library) {
  switch (library) {
    case MatmulAlgoLibrary::kCublasLt: return "cublasLt";
    case MatmulAlgoLibrary::kCublas: return "cublas";
  }
  return "unknown";
}

std::optional<MatmulAlgo> MatmulAlgoCache::find(const MatmulAlgoKey& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return std::nullopt;
  return it->second;
}

void MatmulAlgoCache::insert(const MatmulAlgoKey& key, const MatmulAlgo& algo) {
  std::lock_guard<std::mutex> lock(mu_);
  map_.insert_or_assign(key, algo);
}

size_t MatmulAlgoCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.size();
}

std::vector<std::pair<MatmulAlgoKey, MatmulAlgo>> MatmulAlgoCache::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {map_.begin(), map_.end()};
}

void MatmulAlgoCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  map_.clear();
}

}  // namespace colossal::core
