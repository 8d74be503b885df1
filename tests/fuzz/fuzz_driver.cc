// A portable main() for libFuzzer-style targets: builds with any compiler, runs
// as a cc_test. It replays the seed files and folders named on the command
// line, checks the expected outcome of named seeds, then runs a bounded number
// of deterministic mutations of them (byte flips, truncations, insertions,
// big numbers in length/offset fields and in decimal numbers), stopping at
// --runs or --max_seconds, whichever comes first. A crash or a contract
// violation (the target aborts) fails the test; the input is written to
// $TEST_UNDECLARED_OUTPUTS_DIR (or $TMPDIR) as crash-<target>-<run>.
//
//   fuzz_test [--runs=N] [--max_seconds=S] [--seed=N] [-v] SEED_FILE_OR_DIR...
//
// Seed names state the outcome the target must report (tests/fuzz/README.md):
//   ok__*.ext                 accepted
//   data_loss__*.ext          rejected with DataLoss
//   invalid_argument__*.ext   rejected with InvalidArgument
//   not_found__*.ext          rejected with NotFound
// Other names are replayed without an expectation. Under --config=fuzz or
// tests/fuzz/run_libfuzzer.sh, libFuzzer's own main replaces this file.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" int colossal_fuzz_status_code;
extern "C" void __sanitizer_set_death_callback(void (*callback)()) __attribute__((weak));

namespace {

using Bytes = std::vector<uint8_t>;

struct Seed {
  std::string name;
  Bytes bytes;
};

// The input being run, for the crash handlers.
const Bytes* g_current = nullptr;
char g_crash_path[4096] = {};

void SaveCurrent() {
  if (g_current == nullptr || g_crash_path[0] == 0) return;
  const int fd = ::open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  const uint8_t* p = g_current->data();
  size_t left = g_current->size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n <= 0) break;
    p += n;
    left -= static_cast<size_t>(n);
  }
  ::close(fd);
  static const char note[] = "fuzz driver: the crashing input is saved at ";
  (void)!::write(2, note, sizeof(note) - 1);
  (void)!::write(2, g_crash_path, std::strlen(g_crash_path));
  (void)!::write(2, "\n", 1);
}

void OnSignal(int sig) {
  SaveCurrent();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}


// xorshift64*: deterministic, so a failing run repeats with the same --seed.
struct Rng {
  uint64_t s;
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 2685821657736338717ull;
  }
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(next() % n); }
  bool coin() { return next() & 1; }
};

constexpr uint64_t kBigU64[] = {0,
                                1,
                                7,
                                8,
                                255,
                                1024,
                                65535,
                                0x7fffffffull,
                                0x80000000ull,
                                0xffffffffull,
                                0x100000000ull,
                                99'999'999,
                                100'000'000,
                                100'000'001,
                                0x7fffffffffffffffull,
                                0x8000000000000000ull,
                                0xfffffffffffffff8ull,
                                0xffffffffffffffffull};
constexpr int32_t kBigI32[] = {0, 1, -1, 2, 255, 1024, 65535, 20240520, 20240801, 0x3fffffff, INT32_MAX, INT32_MIN,
                               -1024};
const char* const kBigDecimal[] = {"0",
                                   "1",
                                   "-1",
                                   "8",
                                   "255",
                                   "4294967295",
                                   "4294967296",
                                   "9223372036854775807",
                                   "9223372036854775808",
                                   "18446744073709551615",
                                   "18446744073709551616",
                                   "340282366920938463463374607431768211456",
                                   "1e308",
                                   "1.5",
                                   "-0",
                                   "0x10"};
const char* const kTokens[] = {"F32", "F64", "F16", "BF16", "I64", "BOOL", "F4", "F6_E2M3", "F8_E4M3", "X99", "",
                               "\"", "{", "}", "[", "]", ",", ":", "null", "true", "[]", "{}", "\"__metadata__\"",
                               "\"dtype\"", "\"shape\"", "\"data_offsets\"", "\\u0000", "\\ud800", "\xff", "\xc3\x28"};

// The leading little-endian u64, if it looks like a length prefix of `b`.
bool LengthPrefix(const Bytes& b, uint64_t* n) {
  if (b.size() < 8) return false;
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[i];
  if (v > b.size() - 8) return false;
  *n = v;
  return true;
}

void PutU64(Bytes* b, size_t at, uint64_t v) {
  for (int i = 0; i < 8 && at + i < b->size(); ++i) (*b)[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

// Replaces [at, at + len) with `with`; keeps a leading length prefix that
// covered `at` consistent half of the time (to get past the length check).
void Splice(Bytes* b, Rng& rng, size_t at, size_t len, const Bytes& with) {
  uint64_t prefix = 0;
  const bool fix = LengthPrefix(*b, &prefix) && at >= 8 && at + len <= 8 + prefix && rng.coin();
  b->erase(b->begin() + at, b->begin() + at + len);
  b->insert(b->begin() + at, with.begin(), with.end());
  if (fix) PutU64(b, 0, prefix - len + with.size());
}

void Mutate(Bytes* b, Rng& rng) {
  const size_t size = b->size();
  switch (rng.below(11)) {
    case 0:  // flip a bit
      if (size > 0) (*b)[rng.below(size)] ^= static_cast<uint8_t>(1u << rng.below(8));
      break;
    case 1: {  // set a byte to something interesting
      static const uint8_t kBytes[] = {0, 0xff, 0x7f, 0x80, '{', '}', '"', ':', ',', '[', ']', '0', '9', '-', ' '};
      if (size > 0) (*b)[rng.below(size)] = kBytes[rng.below(std::size(kBytes))];
      break;
    }
    case 2:  // truncate
      b->resize(rng.below(size + 1));
      break;
    case 3: {  // erase a range
      if (size == 0) break;
      const size_t at = rng.below(size);
      Splice(b, rng, at, 1 + rng.below(std::min<size_t>(size - at, 16)), {});
      break;
    }
    case 4: {  // insert random bytes, or append them
      Bytes with(1 + rng.below(8));
      for (uint8_t& x : with) x = static_cast<uint8_t>(rng.next());
      Splice(b, rng, rng.coin() ? size : rng.below(size + 1), 0, with);
      break;
    }
    case 5: {  // a big number in the leading u64 (safetensors' header length)
      uint64_t v = kBigU64[rng.below(std::size(kBigU64))];
      if (rng.coin() && size >= 8) v = size - 8 + rng.below(3) - 1;  // off by one around "exactly the file"
      if (size < 8) b->resize(8);
      PutU64(b, 0, v);
      break;
    }
    case 6: {  // a big number in a 4-byte-aligned int32 (token shard header fields, mostly [0..2])
      if (size < 4) break;
      const size_t words = size / 4;
      const size_t at = 4 * (rng.coin() ? rng.below(std::min<size_t>(words, 3)) : rng.below(words));
      int32_t v = kBigI32[rng.below(std::size(kBigI32))];
      if (rng.coin() && size >= 1024) v = static_cast<int32_t>((size - 1024) / 2 + rng.below(3) - 1);
      std::memcpy(b->data() + at, &v, 4);
      break;
    }
    case 7:
    case 8: {  // replace a decimal number (shape, data_offsets) with a big or odd one
      std::vector<std::pair<size_t, size_t>> runs;
      for (size_t i = 0; i < size;) {
        if (std::isdigit((*b)[i])) {
          size_t j = i;
          while (j < size && std::isdigit((*b)[j])) ++j;
          runs.emplace_back(i, j - i);
          i = j;
        } else {
          ++i;
        }
      }
      if (runs.empty()) break;
      const auto [at, len] = runs[rng.below(runs.size())];
      std::string text = kBigDecimal[rng.below(std::size(kBigDecimal))];
      if (rng.below(3) == 0) {  // the old value plus or minus a little: offsets that lie by a few bytes
        const uint64_t old = std::strtoull(std::string(b->begin() + at, b->begin() + at + len).c_str(), nullptr, 10);
        text = std::to_string(old + rng.below(9) - 4);
      }
      Splice(b, rng, at, len, Bytes(text.begin(), text.end()));
      break;
    }
    case 9: {  // replace a quoted string (dtype, key) with a token
      std::vector<std::pair<size_t, size_t>> strings;
      for (size_t i = 0; i < size; ++i) {
        if ((*b)[i] != '"') continue;
        size_t j = i + 1;
        while (j < size && (*b)[j] != '"' && j - i < 64) ++j;
        if (j < size && (*b)[j] == '"') strings.emplace_back(i + 1, j - i - 1);
        i = j;
      }
      const std::string token = kTokens[rng.below(std::size(kTokens))];
      if (strings.empty()) {
        Splice(b, rng, rng.below(size + 1), 0, Bytes(token.begin(), token.end()));
      } else {
        const auto [at, len] = strings[rng.below(strings.size())];
        Splice(b, rng, at, len, Bytes(token.begin(), token.end()));
      }
      break;
    }
    case 10: {  // repeat a short chunk many times: deep nesting, long strings, long numbers
      if (size == 0) break;
      const size_t at = rng.below(size);
      const Bytes chunk(b->begin() + at, b->begin() + at + 1 + rng.below(std::min<size_t>(size - at, 6)));
      Bytes with;
      const size_t times = size_t{1} << rng.below(14);
      for (size_t k = 0; k < times; ++k) with.insert(with.end(), chunk.begin(), chunk.end());
      Splice(b, rng, at, 0, with);
      break;
    }
  }
}

void ReadSeeds(const std::filesystem::path& path, std::vector<Seed>* seeds) {
  if (std::filesystem::is_directory(path)) {
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::recursive_directory_iterator(path)) {
      if (e.is_regular_file()) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) ReadSeeds(f, seeds);
    return;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "fuzz driver: cannot read seed %s\n", path.c_str());
    std::exit(2);
  }
  seeds->push_back({path.filename().string(), Bytes(std::istreambuf_iterator<char>(in), {})});
}

// The outcome a seed's name asks for (an absl::StatusCode), or -1 for none.
int ExpectedCode(const std::string& name) {
  static const std::map<std::string, int> kCodes = {{"ok", 0}, {"invalid_argument", 3}, {"not_found", 5}, {"data_loss", 15}};
  const size_t sep = name.find("__");
  if (sep == std::string::npos) return -1;
  auto it = kCodes.find(name.substr(0, sep));
  return it == kCodes.end() ? -1 : it->second;
}

int Run(const Bytes& input) {
  g_current = &input;
  colossal_fuzz_status_code = -1;
  LLVMFuzzerTestOneInput(input.data(), input.size());
  g_current = nullptr;
  return colossal_fuzz_status_code;
}

}  // namespace

int main(int argc, char** argv) {
  long runs = 20000;
  double max_seconds = 8;
  uint64_t seed = 20261122;
  bool verbose = false;
  std::vector<Seed> seeds;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--runs=", 0) == 0) {
      runs = std::atol(arg.c_str() + 7);
    } else if (arg.rfind("--max_seconds=", 0) == 0) {
      max_seconds = std::atof(arg.c_str() + 14);
    } else if (arg.rfind("--seed=", 0) == 0) {
      seed = std::strtoull(arg.c_str() + 7, nullptr, 10);
    } else if (arg == "-v") {
      verbose = true;
    } else if (arg.rfind("--", 0) == 0) {
      std::fprintf(stderr, "usage: %s [--runs=N] [--max_seconds=S] [--seed=N] [-v] SEED_FILE_OR_DIR...\n", argv[0]);
      return 2;
    } else {
      ReadSeeds(arg, &seeds);
    }
  }
  if (seeds.empty()) seeds.push_back({"empty", {}});

  const char* dir = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  if (dir == nullptr) dir = std::getenv("TMPDIR");
  if (dir == nullptr) dir = "/tmp";
  const std::string target = std::filesystem::path(argv[0]).filename().string();
  // On an alternate stack, so that a stack overflow's SIGSEGV still saves the input.
  static char alt_stack[1 << 16];
  stack_t ss = {};
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof(alt_stack);
  ::sigaltstack(&ss, nullptr);
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sa.sa_flags = SA_ONSTACK;
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) ::sigaction(sig, &sa, nullptr);
  if (__sanitizer_set_death_callback != nullptr) __sanitizer_set_death_callback(SaveCurrent);

  // 1. The seeds, with their expected outcomes.
  int failures = 0;
  std::snprintf(g_crash_path, sizeof(g_crash_path), "%s/crash-%s-seed", dir, target.c_str());
  for (const Seed& s : seeds) {
    const int code = Run(s.bytes);
    const int want = ExpectedCode(s.name);
    if (verbose) std::printf("seed %-50s -> code %d\n", s.name.c_str(), code);
    if (want >= 0 && code != want) {
      std::fprintf(stderr, "seed %s: expected status code %d, got %d\n", s.name.c_str(), want, code);
      ++failures;
    }
  }

  // 2. Deterministic mutations, bounded by count and time.
  const auto start = std::chrono::steady_clock::now();
  Rng rng{seed * 2 + 1};
  long done = 0;
  std::map<int, long> outcomes;
  for (; done < runs; ++done) {
    if ((done & 63) == 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > max_seconds) {
      break;
    }
    Bytes input = seeds[rng.below(seeds.size())].bytes;
    const size_t steps = 1 + rng.below(4);
    for (size_t k = 0; k < steps; ++k) Mutate(&input, rng);
    if (input.size() > (1 << 18)) input.resize(1 << 18);
    std::snprintf(g_crash_path, sizeof(g_crash_path), "%s/crash-%s-%ld", dir, target.c_str(), done);
    ++outcomes[Run(input)];
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: %zu seeds replayed, %ld mutated inputs in %.2f s (seed %llu); outcomes by status code:",
              target.c_str(), seeds.size(), done, seconds, static_cast<unsigned long long>(seed));
  for (const auto& [code, n] : outcomes) std::printf(" %d:%ld", code, n);
  std::printf("\n");
  if (failures > 0) {
    std::fprintf(stderr, "%d seed(s) did not give their expected outcome\n", failures);
    return 1;
  }
  return 0;
}
