// colossal.launch/env/clock/memory/device_info/jsonl/term/settings and the
// recipe-file helpers the embedded recipe loop uses.
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <climits>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "comm/launch/stop_request.h"
#include "core/alloc/default_allocator.h"
#include "core/trace/trace.h"
#include "lua/api/lua_util.h"
#include "lua/api/objects.h"
#include "lua/recipe.h"
#include "nlohmann/json.hpp"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace colossal::lua {
namespace {

constexpr char kOverridesKey[] = "colossal.overrides";

void PushEnv(lua_State* L, const Runtime& rt) {
  lua_createtable(L, 0, 4);
  lua_pushinteger(L, rt.rank.rank);
  lua_setfield(L, -2, "rank");
  lua_pushinteger(L, rt.rank.world_size);
  lua_setfield(L, -2, "world_size");
  lua_pushinteger(L, rt.rank.local_rank);
  lua_setfield(L, -2, "local_rank");
  lua_pushstring(L, rt.device.to_string().c_str());
  lua_setfield(L, -2, "device");
}

// colossal.launch{device = "auto", seed = 1337} -> env (once per process)
int Launch(lua_State* L) {
  OptionTable o(L, 1, "colossal.launch");
  RuntimeOptions options;
  options.device = o.string("device", options.device);
  options.seed = static_cast<uint64_t>(o.integer("seed", static_cast<int64_t>(options.seed)));
  o.finish();
  if (HasRuntime(L)) {
    RaiseError(L, "colossal.launch: called twice, or after a model or booster was made",
               kErrorUsage);
  }
  absl::StatusOr<comm::RankInfo> rank = ReadEnvironment();
  if (!rank.ok()) RaiseEnvironmentError(rank.status());
  absl::StatusOr<std::shared_ptr<Runtime>> rt = MakeRuntime(options, *rank);
  ThrowIfError(L, "colossal.launch", rt.status());
  SetRuntime(L, *rt);
  PushEnv(L, **rt);
  return 1;
}

// colossal.env() -> {rank, world_size, local_rank, device}: what launch() would
// use, without making the runtime.
int Env(lua_State* L) {
  if (HasRuntime(L)) {
    PushEnv(L, *GetRuntime(L));
    return 1;
  }
  absl::StatusOr<comm::RankInfo> info = ReadEnvironment();
  if (!info.ok()) RaiseEnvironmentError(info.status());
  Runtime rt;
  rt.rank = *info;
  rt.device = core::cuda_device_count() > 0 ? core::Device::cuda(info->local_rank)
                                            : core::Device::cpu();
  PushEnv(L, rt);
  return 1;
}

int Clock(lua_State* L) {
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  lua_pushnumber(L, std::chrono::duration<double>(now).count());
  return 1;
}

// colossal.catch_stop_signals(): from now on the first SIGINT or SIGTERM
// asks the run to stop at a step boundary (comm/launch/stop_request.h); a
// second one stops it at once.
int CatchStopSignals(lua_State* L) {
  comm::InstallStopHandlers();
  return 0;
}

// One int64 reduced over every process of the job (a collective: all of them
// call it at the same point), through the runtime's process group on its
// device. With one process, `value` itself.
int64_t AllReduceInt(lua_State* L, int64_t value, comm::ReduceOp op, const char* what) {
  std::shared_ptr<Runtime> rt = GetRuntime(L);
  if (rt->rank.world_size == 1) return value;
  absl::StatusOr<std::shared_ptr<comm::ProcessGroup>> pg = rt->process_group();
  ThrowIfError(L, what, pg.status());
  const core::Stream& stream = rt->ctx->compute_stream();
  absl::StatusOr<core::Tensor> host = core::Tensor::empty({1}, core::DType::kI64, core::Stream::cpu());
  ThrowIfError(L, what, host.status());
  *host->data<int64_t>() = value;
  absl::StatusOr<core::Tensor> on_device = host->to(rt->device, stream);
  ThrowIfError(L, what, on_device.status());
  absl::StatusOr<comm::Buffer> buffer = comm::Buffer::of(*on_device);
  ThrowIfError(L, what, buffer.status());
  absl::StatusOr<comm::WorkPtr> work = (*pg)->all_reduce(*buffer, op, {.stream = stream});
  ThrowIfError(L, what, work.status());
  ThrowIfError(L, what, (*work)->wait_on(stream));
  absl::StatusOr<core::Tensor> back = on_device->to(core::Device::cpu(), stream);
  ThrowIfError(L, what, back.status());
  stream.synchronize();
  return *back->data<int64_t>();
}

// colossal.stop_requested() -> "SIGTERM" | "SIGINT" | nil: whether any
// process of the job received one (since catch_stop_signals). With several
// processes a collective (a one-element max over every rank) that all of
// them call at the same point, so they agree on the step they stop at.
int StopRequested(lua_State* L) {
  const int64_t signo = AllReduceInt(L, comm::StopSignal(), comm::ReduceOp::kMax, "colossal.stop_requested");
  if (signo == SIGTERM) {
    lua_pushstring(L, "SIGTERM");
  } else if (signo == SIGINT) {
    lua_pushstring(L, "SIGINT");
  } else {
    lua_pushnil(L);
  }
  return 1;
}

// colossal.all_reduce(n) -> the integer n summed over every process of the job
// (a collective: every process calls it at the same point; n itself with one
// process). The recipe loop sums a step's counted targets with it.
int AllReduce(lua_State* L) {
  int ok = 0;
  const lua_Integer n = lua_tointegerx(L, 1, &ok);
  if (!ok) RaiseError(L, "colossal.all_reduce: takes an integer", kErrorUsage);
  lua_pushinteger(L, AllReduceInt(L, n, comm::ReduceOp::kSum, "colossal.all_reduce"));
  return 1;
}

// colossal.memory() -> {allocated, peak, reserved (device bytes), max_rss (host
// bytes), pinned, pinned_peak (pinned host bytes: Gemini's host chunks, ZeRO's
// offloaded state; 0 on the CPU)}. Pinned memory is the driver's mapping, which
// max_rss does not count.
int Memory(lua_State* L) {
  std::shared_ptr<Runtime> rt = GetRuntime(L);
  const core::AllocatorStats s = rt->ctx->allocator()->stats();
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  core::AllocatorStats pinned;
  if (rt->device.is_cuda()) {
    absl::StatusOr<std::shared_ptr<core::Allocator>> a = core::pinned_host_allocator();
    if (a.ok()) pinned = (*a)->stats();
  }
  PushNumberTable(L, {{"allocated", static_cast<double>(s.allocated_bytes)},
                      {"peak", static_cast<double>(s.peak_allocated_bytes)},
                      {"reserved", static_cast<double>(s.reserved_bytes)},
                      {"max_rss", static_cast<double>(usage.ru_maxrss) * 1024.0},
                      {"pinned", static_cast<double>(pinned.allocated_bytes)},
                      {"pinned_peak", static_cast<double>(pinned.peak_allocated_bytes)}});
  return 1;
}

// colossal.reset_peak_memory(): the device allocator's peak restarts from what
// is allocated now (e.g. after warm-up steps, so that a one-off peak at boost
// does not hide the steady state).
int ResetPeakMemory(lua_State* L) {
  GetRuntime(L)->ctx->allocator()->reset_peak_stats();
  return 0;
}

// colossal.trace_start(): this process records what follows (module forwards
// and backwards, collectives, optimizer and offload work; host threads and
// CUDA streams) until colossal.trace_stop(file) writes it as Chrome
// trace-event JSON (chrome://tracing, ui.perfetto.dev). core/trace/trace.h.
int TraceStart(lua_State* L) {
  ThrowIfError(L, "colossal.trace_start", core::trace::start(GetRuntime(L)->rank.rank));
  return 0;
}

int TraceStop(lua_State* L) {
  const std::string path =
      StringArg(L, 1, /*non_empty=*/true, "colossal.trace_stop: the first argument is the file to write");
  // Its folder is made as the log's is (an error, if any, is the write's).
  std::error_code ignored;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ignored);
  ThrowIfError(L, "colossal.trace_stop", core::trace::stop_and_write(path));
  return 0;
}

// colossal.device_info() -> {name, peak_flops_16bit (dense tensor-core FLOP/s, or nil)}
int DeviceInfo(lua_State* L) {
  std::shared_ptr<Runtime> rt = GetRuntime(L);
  lua_createtable(L, 0, 2);
  std::string name = "CPU";
#if COLOSSAL_WITH_CUDA
  if (rt->device.is_cuda()) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, rt->device.index()) == cudaSuccess) name = p.name;
  }
#endif
  // Dense bf16/fp16 tensor-core peaks (vendor data sheets), for MFU.
  double peak = 0;
  if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos) {
    peak = 989e12;
  } else if (name.find("A100") != std::string::npos) {
    peak = 312e12;
  }
  lua_pushstring(L, name.c_str());
  lua_setfield(L, -2, "name");
  if (peak > 0) {
    lua_pushnumber(L, peak);
    lua_setfield(L, -2, "peak_flops_16bit");
  }
  return 1;
}

struct JsonLog {
  static constexpr char kMetatable[] = "colossal.JsonLog";
  static constexpr char kTypeName[] = "a JSON lines log (colossal.jsonl)";
  std::string path;
  std::FILE* file = nullptr;
  ~JsonLog() {
    if (file != nullptr) std::fclose(file);
  }
};

void MakeParents(const std::string& path) {
  std::string prefix;
  const std::vector<std::string> parts = absl::StrSplit(path, '/');
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    prefix += parts[i];
    if (!prefix.empty()) mkdir(prefix.c_str(), 0755);
    prefix += "/";
  }
}

// colossal.check_writable(path[, {dir = true}]): raises (a usage error naming
// the path and the system's reason) unless the run will be able to write
// there. A folder (dir) is made, with its parents, and a probe file is
// created in it and removed; a file's folders are made (as jsonl and
// trace_stop make them) and the file opened for appending, then removed if
// the probe created it. A recipe checks its outputs before step 1, so an
// unwritable checkpoint folder is not found at the first save, hours in.
int CheckWritable(lua_State* L) {
  const std::string path =
      StringArg(L, 1, /*non_empty=*/true, "colossal.check_writable: wants a path");
  bool dir = false;
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "dir");
    dir = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  auto fail = [&](const std::string& what, const std::string& why) {
    RaiseError(L, absl::StrCat("cannot ", what, " ", path, ": ", why), kErrorUsage);
  };
  std::error_code ec;
  const std::filesystem::path folder = dir ? std::filesystem::path(path)
                                           : std::filesystem::path(path).parent_path();
  if (!folder.empty() && !std::filesystem::is_directory(folder, ec)) {
    std::filesystem::create_directories(folder, ec);
    if (ec) fail(dir ? "make the folder" : "make the folder for", ec.message());
  }
  if (dir) {
    const std::string probe = (folder / absl::StrCat(".colossal_write_probe.", getpid())).string();
    std::FILE* f = std::fopen(probe.c_str(), "w");
    if (f == nullptr) fail("write in", std::strerror(errno));
    std::fclose(f);
    std::remove(probe.c_str());
    return 0;
  }
  if (std::filesystem::is_directory(path, ec)) fail("write", "it is a folder");
  const bool existed = std::filesystem::exists(path, ec);
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) fail("write", std::strerror(errno));
  std::fclose(f);
  if (!existed) std::remove(path.c_str());
  return 0;
}

// colossal.jsonl(path) -> log; log:write{step = 1, loss = 2.5} appends one line
int OpenJsonl(lua_State* L) {
  auto log = std::make_shared<JsonLog>();
  log->path = StringArg(L, 1, /*non_empty=*/true, "colossal.jsonl: wants a file path");
  MakeParents(log->path);
  log->file = std::fopen(log->path.c_str(), "a");
  if (log->file == nullptr) {
    RaiseError(L, absl::StrCat("colossal.jsonl: cannot open ", log->path, " for appending"),
               kErrorRuntime);
  }
  PushHandle(L, std::move(log));
  return 1;
}

int WriteJsonl(lua_State* L) {
  std::shared_ptr<JsonLog> log = CheckHandle<JsonLog>(L, 1);
  if (!lua_istable(L, 2)) RaiseError(L, "log:write: wants a table", kErrorUsage);
  nlohmann::json line = nlohmann::json::object();
  lua_pushnil(L);
  while (lua_next(L, 2) != 0) {
    if (lua_type(L, -2) == LUA_TSTRING) {
      const std::string key = lua_tostring(L, -2);
      switch (lua_type(L, -1)) {
        case LUA_TNUMBER:
          if (lua_isinteger(L, -1)) {
            line[key] = static_cast<int64_t>(lua_tointeger(L, -1));
          } else {
            line[key] = lua_tonumber(L, -1);
          }
          break;
        case LUA_TBOOLEAN: line[key] = static_cast<bool>(lua_toboolean(L, -1)); break;
        case LUA_TSTRING: line[key] = lua_tostring(L, -1); break;
        default: break;  // tables and functions are not logged
      }
    }
    lua_pop(L, 1);
  }
  const std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (std::fwrite(text.data(), 1, text.size(), log->file) != text.size() ||
      std::fflush(log->file) != 0) {
    RaiseError(L, absl::StrCat("log:write: cannot write ", log->path), kErrorRuntime);
  }
  return 0;
}

// colossal.term.write(text): stdout without a newline (progress bars)
int TermWrite(lua_State* L) {
  size_t n = 0;
  const char* s = lua_tolstring(L, 1, &n);
  if (s != nullptr) {
    std::fwrite(s, 1, n, stdout);
    std::fflush(stdout);
  }
  return 0;
}

int TermIsatty(lua_State* L) {
  lua_pushboolean(L, isatty(STDOUT_FILENO) == 1);
  return 1;
}

// colossal.settings(t) -> t with the command line's --set overrides applied
int Settings(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  lua_getfield(L, LUA_REGISTRYINDEX, kOverridesKey);
  if (lua_istable(L, -1)) {
    const lua_Integer n = luaL_len(L, -1);
    for (lua_Integer i = 1; i <= n; ++i) {
      lua_geti(L, -1, i);
      const std::string assignment = lua_tostring(L, -1);
      lua_pop(L, 1);
      ThrowIfError(L, "", ApplyOverride(L, 1, assignment));
    }
  }
  lua_pop(L, 1);
  lua_pushboolean(L, 1);
  lua_setfield(L, LUA_REGISTRYINDEX, "colossal.overrides_applied");
  return 1;
}

// The source with comments and string contents blanked (newlines kept), the
// line of each byte and the table depth ({ } nesting) before it.
struct Code {
  std::string text;
  std::vector<int> line, depth;
};

// The length of a long bracket opening at s[i] ("[[", "[==["), or 0.
size_t LongBracket(const std::string& s, size_t i, size_t* level) {
  if (s[i] != '[') return 0;
  size_t j = i + 1;
  while (j < s.size() && s[j] == '=') ++j;
  if (j >= s.size() || s[j] != '[') return 0;
  *level = j - i - 1;
  return j - i + 1;
}

Code Scan(const std::string& src) {
  Code c;
  c.text = src;
  c.line.resize(src.size() + 1);
  c.depth.resize(src.size() + 1);
  auto blank = [&](size_t from, size_t to) {
    for (size_t k = from; k < to && k < src.size(); ++k) {
      if (src[k] != '\n') c.text[k] = ' ';
    }
  };
  size_t i = 0;
  while (i < src.size()) {
    size_t level = 0, open = 0, end = std::string::npos;
    if (src.compare(i, 2, "--") == 0) {
      if ((open = LongBracket(src, i + 2, &level)) != 0) {
        end = src.find("]" + std::string(level, '=') + "]", i + 2 + open);
        end = end == std::string::npos ? src.size() : end + level + 2;
      } else {
        end = src.find('\n', i);
        if (end == std::string::npos) end = src.size();
      }
      blank(i, end);
    } else if ((open = LongBracket(src, i, &level)) != 0) {
      end = src.find("]" + std::string(level, '=') + "]", i + open);
      end = end == std::string::npos ? src.size() : end + level + 2;
      blank(i + 1, end - 1);  // keep a one-character "string"
    } else if (src[i] == '"' || src[i] == '\'') {
      end = i + 1;
      while (end < src.size() && src[end] != src[i] && src[end] != '\n') end += src[end] == '\\' ? 2 : 1;
      end = std::min(end + 1, src.size());
      blank(i + 1, end - 1);
    }
    i = end == std::string::npos ? i + 1 : end;
  }
  int line = 1, depth = 0;
  for (size_t k = 0; k < c.text.size(); ++k) {
    c.line[k] = line;
    c.depth[k] = depth;
    if (c.text[k] == '\n') ++line;
    if (c.text[k] == '{') ++depth;
    if (c.text[k] == '}') --depth;
  }
  c.line[c.text.size()] = line;
  c.depth[c.text.size()] = depth;
  return c;
}

// The line of `dotted` ("optimizer.lr") in `src`, or 0. The first key is the
// outermost `key =` of the file; each next one is looked for only inside the
// value of the previous (up to the `,`, `;` or `}` that ends it). "" gives the
// line of the outermost `return`.
int FindKeyLine(const std::string& src, const std::string& dotted) {
  const Code c = Scan(src);
  std::vector<std::string> keys;
  std::stringstream ss(dotted);
  for (std::string k; std::getline(ss, k, '.');) keys.push_back(k);
  if (dotted.empty()) {
    const std::regex ret("(^|[^A-Za-z0-9_.])return([^A-Za-z0-9_]|$)");
    int found = 0, best = INT_MAX;
    for (auto it = std::sregex_iterator(c.text.begin(), c.text.end(), ret); it != std::sregex_iterator(); ++it) {
      const size_t pos = it->position(0) + it->length(1);
      if (c.depth[pos] <= best) best = c.depth[pos], found = c.line[pos];
    }
    return found;
  }
  size_t begin = 0, end = c.text.size();
  int want = -1;  // the depth the next key must be at; -1: the outermost
  int found = 0;
  for (const std::string& key : keys) {
    if (key.empty()) return 0;
    for (char ch : key) {
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_') return 0;
    }
    const std::regex pattern("(^|[^A-Za-z0-9_.])" + key + "\\s*=([^=]|$)");
    size_t best = std::string::npos;
    int best_depth = INT_MAX;
    const auto first = c.text.begin() + static_cast<std::ptrdiff_t>(begin);
    const auto last = c.text.begin() + static_cast<std::ptrdiff_t>(end);
    for (auto it = std::sregex_iterator(first, last, pattern); it != std::sregex_iterator(); ++it) {
      const size_t pos = begin + it->position(0) + it->length(1);
      const int d = c.depth[pos];
      if (want >= 0 ? d == want : d < best_depth) {
        best = pos;
        best_depth = d;
        if (want >= 0) break;
      }
    }
    if (best == std::string::npos) return 0;
    found = c.line[best];
    // The value runs to the `,`, `;` or `}` at the key's depth.
    size_t stop = best;
    while (stop < c.text.size() &&
           !(c.depth[stop] == best_depth && (c.text[stop] == ',' || c.text[stop] == ';' || c.text[stop] == '}'))) {
      ++stop;
    }
    begin = best;
    end = stop;
    want = best_depth + 1;
  }
  return found;
}

// colossal._key_line(file, "optimizer.lr") -> the line of that key in the
// recipe's source, or nil: the recipe loop's errors point at it. The first key
// is the outermost `key =` of the file; each next one is looked for only
// inside the value of the previous (comments and strings skipped).
// colossal._key_line(file, "") -> the line of the outermost `return`.
int KeyLine(lua_State* L) {
  const char* file = lua_tostring(L, 1);
  const char* dotted = lua_tostring(L, 2);
  if (file == nullptr || dotted == nullptr) return 0;
  std::ifstream in(file);
  if (!in) return 0;
  std::stringstream source;
  source << in.rdbuf();
  const int line = FindKeyLine(source.str(), dotted);
  if (line == 0) return 0;
  lua_pushinteger(L, line);
  return 1;
}

}  // namespace

void SetOverrides(lua_State* L, const std::vector<std::string>& assignments) {
  lua_createtable(L, static_cast<int>(assignments.size()), 0);
  for (size_t i = 0; i < assignments.size(); ++i) {
    lua_pushstring(L, assignments[i].c_str());
    lua_rawseti(L, -2, static_cast<lua_Integer>(i) + 1);
  }
  lua_setfield(L, LUA_REGISTRYINDEX, kOverridesKey);
}

bool OverridesApplied(lua_State* L) {
  lua_getfield(L, LUA_REGISTRYINDEX, "colossal.overrides_applied");
  const bool applied = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return applied;
}

int OpenUtil(lua_State* L) {
  static const luaL_Reg kNone[] = {{nullptr, nullptr}};
  static const luaL_Reg kLogMethods[] = {{"write", Protected<WriteJsonl>}, {nullptr, nullptr}};
  RegisterType<JsonLog>(L, kLogMethods);
  (void)kNone;
  const luaL_Reg functions[] = {{"launch", Protected<Launch>},
                                {"env", Protected<Env>},
                                {"clock", Clock},
                                {"catch_stop_signals", Protected<CatchStopSignals>},
                                {"stop_requested", Protected<StopRequested>},
                                {"all_reduce", Protected<AllReduce>},
                                {"memory", Protected<Memory>},
                                {"reset_peak_memory", Protected<ResetPeakMemory>},
                                {"trace_start", Protected<TraceStart>},
                                {"trace_stop", Protected<TraceStop>},
                                {"device_info", Protected<DeviceInfo>},
                                {"jsonl", Protected<OpenJsonl>},
                                {"check_writable", Protected<CheckWritable>},
                                {"settings", Protected<Settings>},
                                {"_key_line", Protected<KeyLine>},
                                {nullptr, nullptr}};
  luaL_setfuncs(L, functions, 0);
  const luaL_Reg term[] = {{"write", TermWrite}, {"isatty", TermIsatty}, {nullptr, nullptr}};
  luaL_newlib(L, term);
  lua_setfield(L, -2, "term");
  return 0;
}

}  // namespace colossal::lua
