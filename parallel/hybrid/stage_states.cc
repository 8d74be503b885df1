#include "parallel/hybrid/stage_states.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/dtype/dtype.h"
#include "core/status/status.h"
#include "nlohmann/json.hpp"

namespace colossal::parallel {
namespace {

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// A JSON text to / from stage `peer`: its length, then its bytes.
absl::Status send_json(const nlohmann::json& j, int peer, const HostP2P& p2p) {
  const std::string text = j.dump();
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor n,
                            core::Tensor::empty({1}, core::DType::kI64, core::Stream::cpu()));
  n.data<int64_t>()[0] = static_cast<int64_t>(text.size());
  COLOSSAL_RETURN_IF_ERROR(p2p(n, peer, true));
  COLOSSAL_ASSIGN_OR_RETURN(
      core::Tensor bytes, core::Tensor::empty({static_cast<int64_t>(text.size())}, core::DType::kU8,
                                              core::Stream::cpu()));
  std::memcpy(bytes.raw_data(), text.data(), text.size());
  return p2p(bytes, peer, true);
}

absl::StatusOr<nlohmann::json> recv_json(int peer, const HostP2P& p2p) {
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor n,
                            core::Tensor::empty({1}, core::DType::kI64, core::Stream::cpu()));
  COLOSSAL_RETURN_IF_ERROR(p2p(n, peer, false));
  COLOSSAL_ASSIGN_OR_RETURN(
      core::Tensor bytes,
      core::Tensor::empty({n.data<int64_t>()[0]}, core::DType::kU8, core::Stream::cpu()));
  COLOSSAL_RETURN_IF_ERROR(p2p(bytes, peer, false));
  const std::string text(static_cast<const char*>(bytes.raw_data()), bytes.numel());
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::DataLossError(absl::StrCat("pipeline stage ", peer, " sent a bad state manifest"));
  }
  return j;
}

// [key, dtype, shape] of each tensor.
nlohmann::json decl_list(const std::vector<nn::StateTensorDecl>& decls) {
  nlohmann::json out = nlohmann::json::array();
  for (const nn::StateTensorDecl& d : decls) {
    out.push_back({d.key, core::dtype_name(d.dtype), d.shape.dims()});
  }
  return out;
}

absl::StatusOr<std::vector<nn::StateTensorDecl>> decls_of(const nlohmann::json& list, int peer) {
  std::vector<nn::StateTensorDecl> out;
  const auto bad = [peer] {
    return absl::DataLossError(absl::StrCat("pipeline stage ", peer, " sent a bad state manifest"));
  };
  if (!list.is_array()) return bad();
  for (const nlohmann::json& e : list) {
    if (!e.is_array() || e.size() != 3 || !e[0].is_string() || !e[1].is_string() || !e[2].is_array()) {
      return bad();
    }
    nn::StateTensorDecl d;
    d.key = e[0].get<std::string>();
    COLOSSAL_ASSIGN_OR_RETURN(d.dtype, core::parse_dtype(e[1].get<std::string>()));
    COLOSSAL_ASSIGN_OR_RETURN(d.shape, core::Shape::make(e[2].get<std::vector<int64_t>>()));
    out.push_back(std::move(d));
  }
  return out;
}

absl::Status send_state(const nn::OptimizerStateDict& sd, int peer, const HostP2P& p2p) {
  nlohmann::json manifest;
  manifest["meta"] = nn::optimizer_meta_to_json(sd.meta);
  std::vector<nn::StateTensorDecl> decls;
  for (const auto& [key, t] : sd.tensors) decls.push_back({key, t.dtype(), t.shape()});
  manifest["tensors"] = decl_list(decls);
  COLOSSAL_RETURN_IF_ERROR(send_json(manifest, peer, p2p));
  for (const auto& [key, t] : sd.tensors) COLOSSAL_RETURN_IF_ERROR(p2p(t, peer, true));
  return absl::OkStatus();
}

absl::StatusOr<nn::OptimizerStateDict> recv_state(int peer, const HostP2P& p2p) {
  COLOSSAL_ASSIGN_OR_RETURN(const nlohmann::json manifest, recv_json(peer, p2p));
  if (!manifest.contains("meta") || !manifest["meta"].is_string() || !manifest.contains("tensors")) {
    return absl::DataLossError(absl::StrCat("pipeline stage ", peer, " sent a bad state manifest"));
  }
  nn::OptimizerStateDict sd;
  COLOSSAL_ASSIGN_OR_RETURN(sd.meta,
                            nn::optimizer_meta_from_json(manifest["meta"].get<std::string>()));
  COLOSSAL_ASSIGN_OR_RETURN(const std::vector<nn::StateTensorDecl> decls,
                            decls_of(manifest["tensors"], peer));
  for (const nn::StateTensorDecl& d : decls) {
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor t,
                              core::Tensor::empty(d.shape, d.dtype, core::Stream::cpu()));
    COLOSSAL_RETURN_IF_ERROR(p2p(t, peer, false));
    sd.tensors.emplace(d.key, std::move(t));
  }
  return sd;
}

}  // namespace

absl::StatusOr<nn::OptimizerStateDict> gather_stage_states(nn::OptimizerStateDict mine, int stage,
                                                           int stages,
                                                           const std::vector<std::string>& tied,
                                                           bool to_all, const HostP2P& p2p) {
  if (stage != 0) {
    COLOSSAL_RETURN_IF_ERROR(send_state(mine, 0, p2p));
    if (!to_all) return mine;
    return recv_state(0, p2p);
  }
  for (int s = 1; s < stages; ++s) {
    COLOSSAL_ASSIGN_OR_RETURN(nn::OptimizerStateDict theirs, recv_state(s, p2p));
    if (theirs.meta.groups.size() != mine.meta.groups.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("pipeline stage ", s, "'s optimizer has ", theirs.meta.groups.size(),
                       " parameter groups; stage 0's has ", mine.meta.groups.size()));
    }
    for (size_t g = 0; g < theirs.meta.groups.size(); ++g) {
      for (const std::string& p : theirs.meta.groups[g].params) {
        if (!contains(tied, p)) mine.meta.groups[g].params.push_back(p);
      }
    }
    for (auto& [key, t] : theirs.tensors) {
      if (!contains(tied, nn::param_of_state_key(key))) mine.tensors.emplace(key, std::move(t));
    }
  }
  if (to_all) {
    for (int s = 1; s < stages; ++s) COLOSSAL_RETURN_IF_ERROR(send_state(mine, s, p2p));
  }
  return mine;
}

nn::OptimizerStateDict stage_part(const nn::OptimizerStateDict& whole,
                                  const nn::ParameterTable& local) {
  nn::OptimizerStateDict part;
  part.meta = whole.meta;
  for (nn::GroupState& g : part.meta.groups) {
    // In the stage's table order, as its optimizer lists them (a tied weight
    // comes first on stage 0 but last on the last stage).
    std::vector<std::pair<const nn::ParameterEntry*, std::string>> kept;
    for (const std::string& p : g.params) {
      if (const nn::ParameterEntry* e = local.find(p)) kept.emplace_back(e, p);
    }
    std::sort(kept.begin(), kept.end());
    g.params.clear();
    for (auto& [e, p] : kept) g.params.push_back(std::move(p));
  }
  for (const auto& [key, t] : whole.tensors) {
    if (local.find(nn::param_of_state_key(key)) != nullptr) part.tensors.emplace(key, t);
  }
  return part;
}

absl::StatusOr<std::vector<std::vector<nn::StateTensorDecl>>> gather_stage_decls(
    std::vector<nn::StateTensorDecl> mine, int stage, int stages, const HostP2P& p2p) {
  if (stage != 0) {
    COLOSSAL_RETURN_IF_ERROR(send_json(decl_list(mine), 0, p2p));
    return std::vector<std::vector<nn::StateTensorDecl>>{std::move(mine)};
  }
  std::vector<std::vector<nn::StateTensorDecl>> out = {std::move(mine)};
  for (int s = 1; s < stages; ++s) {
    COLOSSAL_ASSIGN_OR_RETURN(const nlohmann::json list, recv_json(s, p2p));
    COLOSSAL_ASSIGN_OR_RETURN(std::vector<nn::StateTensorDecl> theirs, decls_of(list, s));
    out.push_back(std::move(theirs));
  }
  return out;
}

}  // namespace colossal::parallel
