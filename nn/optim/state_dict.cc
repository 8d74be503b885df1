#include "nn/optim/state_dict.h"

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "core/status/suggest.h"
#include "nlohmann/json.hpp"

namespace colossal::nn {
namespace {

using Json = nlohmann::json;

constexpr int kVersion = 1;
constexpr absl::string_view kTypes[] = {"adamw", "cpu_adam", "hybrid_adam", "sgd"};

absl::Status bad(absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("optimizer state JSON: ", where, ": ", what));
}

// Reads obj[key] into *out, with a message naming `where`.key on a missing or
// mistyped value.
template <typename T>
absl::Status get(const Json& obj, const char* key, const std::string& where, T* out) {
  const auto it = obj.find(key);
  if (it == obj.end()) return bad(where, absl::StrCat("missing key \"", key, "\""));
  bool ok = false;
  if constexpr (std::is_same_v<T, bool>) {
    ok = it->is_boolean();
  } else if constexpr (std::is_same_v<T, double>) {
    ok = it->is_number();
  } else if constexpr (std::is_same_v<T, int>) {
    ok = it->is_number_integer();
  } else {
    ok = it->is_string();
  }
  if (!ok) return bad(where, absl::StrCat("\"", key, "\" has the wrong type (", it->type_name(), ")"));
  *out = it->get<T>();
  return absl::OkStatus();
}

}  // namespace

std::string state_key(absl::string_view param, absl::string_view state) {
  return absl::StrCat("state.", param, ".", state);
}

std::string param_of_state_key(absl::string_view key) {
  const size_t dot = key.rfind('.');
  if (!absl::StartsWith(key, "state.") || dot == absl::string_view::npos || dot <= 6) return "";
  return std::string(key.substr(6, dot - 6));
}

bool is_adam_type(absl::string_view type) {
  return type == "adamw" || type == "cpu_adam" || type == "hybrid_adam";
}

std::string optimizer_meta_to_json(const OptimizerMeta& meta) {
  Json groups = Json::array();
  for (const GroupState& g : meta.groups) {
    const GroupHyperParams& h = g.hyper;
    Json j = Json::object();
    j["lr"] = h.lr;
    j["weight_decay"] = h.weight_decay;
    if (is_adam_type(meta.type)) {
      j["betas"] = Json::array({h.beta1, h.beta2});
      j["eps"] = h.eps;
      j["bias_correction"] = h.bias_correction;
      j["adamw_mode"] = h.adamw_mode;
    } else {
      j["momentum"] = h.momentum;
      j["dampening"] = h.dampening;
      j["nesterov"] = h.nesterov;
    }
    j["params"] = g.params;
    groups.push_back(std::move(j));
  }
  Json root = Json::object();
  root["version"] = kVersion;
  root["type"] = meta.type;
  root["param_groups"] = std::move(groups);
  return root.dump();
}

absl::StatusOr<OptimizerMeta> optimizer_meta_from_json(absl::string_view text) {
  Json root;
  try {
    root = Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    return bad("parse error", e.what());
  }
  if (!root.is_object()) return bad("top level", "expected an object");
  int version = 0;
  if (absl::Status s = get(root, "version", "top level", &version); !s.ok()) return s;
  if (version != kVersion) {
    return bad("\"version\"", absl::StrCat(version, " is not supported (this build reads ", kVersion, ")"));
  }
  OptimizerMeta meta;
  if (absl::Status s = get(root, "type", "top level", &meta.type); !s.ok()) return s;
  bool known = false;
  for (absl::string_view t : kTypes) known = known || t == meta.type;
  if (!known) {
    return bad("\"type\"", absl::StrCat("unknown optimizer \"", meta.type, "\"",
                                        core::did_you_mean(meta.type, kTypes),
                                        " (accepted: adamw, cpu_adam, hybrid_adam, sgd)"));
  }
  const auto groups = root.find("param_groups");
  if (groups == root.end() || !groups->is_array()) {
    return bad("top level", "missing array \"param_groups\"");
  }
  const bool adam = is_adam_type(meta.type);
  for (size_t i = 0; i < groups->size(); ++i) {
    const Json& j = (*groups)[i];
    const std::string where = absl::StrCat("param_groups[", i, "]");
    if (!j.is_object()) return bad(where, "expected an object");
    GroupState g;
    GroupHyperParams& h = g.hyper;
    absl::Status s = get(j, "lr", where, &h.lr);
    if (s.ok()) s = get(j, "weight_decay", where, &h.weight_decay);
    if (s.ok() && adam) {
      const auto betas = j.find("betas");
      if (betas == j.end() || !betas->is_array() || betas->size() != 2 || !(*betas)[0].is_number() ||
          !(*betas)[1].is_number()) {
        return bad(where, "\"betas\" must be an array of two numbers");
      }
      h.beta1 = (*betas)[0].get<double>();
      h.beta2 = (*betas)[1].get<double>();
      s = get(j, "eps", where, &h.eps);
      if (s.ok()) s = get(j, "bias_correction", where, &h.bias_correction);
      if (s.ok()) s = get(j, "adamw_mode", where, &h.adamw_mode);
    } else if (s.ok()) {
      s = get(j, "momentum", where, &h.momentum);
      if (s.ok()) s = get(j, "dampening", where, &h.dampening);
      if (s.ok()) s = get(j, "nesterov", where, &h.nesterov);
    }
    if (!s.ok()) return s;
    const auto params = j.find("params");
    if (params == j.end() || !params->is_array()) return bad(where, "missing array \"params\"");
    for (const Json& p : *params) {
      if (!p.is_string()) return bad(where, "\"params\" must hold parameter names (strings)");
      g.params.push_back(p.get<std::string>());
    }
    meta.groups.push_back(std::move(g));
  }
  return meta;
}

absl::StatusOr<StreamedOptimizerState> stream_held(OptimizerStateDict sd, bool mine,
                                                   const core::Stream& stream) {
  StreamedOptimizerState out;
  out.held.meta = std::move(sd.meta);
  auto streamed = std::make_shared<std::vector<core::Tensor>>();
  for (auto& [key, t] : sd.tensors) {
    if (!mine) continue;
    if (t.numel() == 1) {
      core::Tensor host = t;
      if (t.device().is_cuda()) {
        COLOSSAL_ASSIGN_OR_RETURN(host, t.to(core::Device::cpu(), stream));
        stream.synchronize();
      }
      out.held.tensors.emplace(key, std::move(host));
    } else {
      out.streamed.push_back({key, t.dtype(), t.shape()});
      streamed->push_back(std::move(t));
    }
  }
  out.write = [streamed, stream](const StatePieceFn& piece) -> absl::Status {
    for (size_t i = 0; i < streamed->size(); ++i) {
      core::Tensor host = (*streamed)[i];
      if (host.device().is_cuda()) {
        COLOSSAL_ASSIGN_OR_RETURN(host, host.to(core::Device::cpu(), stream));
        stream.synchronize();
      }
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor flat, host.reshape({host.numel()}));
      piece(i, 0, flat);
    }
    return absl::OkStatus();
  };
  return out;
}

absl::StatusOr<OptimizerStateDict> collect_streamed(StreamedOptimizerState state, bool hold) {
  OptimizerStateDict out = std::move(state.held);
  std::vector<core::Tensor> whole;
  if (hold) {
    for (const StateTensorDecl& d : state.streamed) {
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor t, core::Tensor::empty(d.shape, d.dtype, core::Stream::cpu()));
      whole.push_back(t);
    }
  }
  absl::Status bad_piece;
  COLOSSAL_RETURN_IF_ERROR(state.write([&](size_t index, int64_t offset, const core::Tensor& piece) {
    if (!hold || !bad_piece.ok()) return;
    if (index >= whole.size() || offset < 0 || piece.numel() > whole[index].numel() - offset ||
        piece.dtype() != whole[index].dtype()) {
      bad_piece = absl::InvalidArgumentError(absl::StrCat(
          "a piece ", piece.to_string(), " at ", offset, " does not fit state tensor ", index,
          index < whole.size() ? absl::StrCat(" '", state.streamed[index].key, "' ", whole[index].to_string()) : ""));
      return;
    }
    std::memcpy(static_cast<char*>(whole[index].raw_data()) + offset * core::dtype_size(piece.dtype()),
                piece.raw_data(), piece.nbytes());
  }));
  COLOSSAL_RETURN_IF_ERROR(bad_piece);
  for (size_t i = 0; i < whole.size(); ++i) out.tensors[state.streamed[i].key] = std::move(whole[i]);
  return out;
}

}  // namespace colossal::nn
