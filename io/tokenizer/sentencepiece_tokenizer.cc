#include "io/tokenizer/sentencepiece_tokenizer.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "io/common/file_util.h"
#include "io/tokenizer/sentencepiece_model.h"

namespace colossal::io {
namespace {

class SentencePieceTokenizer final : public TextTokenizer {
 public:
  SentencePieceTokenizer(std::unique_ptr<SentencePieceModel> sp, std::string path,
                         std::optional<int32_t> bos, std::optional<int32_t> eos, bool add_bos, bool add_eos)
      : TextTokenizer(std::move(path), bos, eos, add_bos && bos.has_value()),
        sp_(std::move(sp)),
        add_eos_(add_eos && eos.has_value()) {}

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special_tokens) const override {
    std::vector<int32_t> out;
    if (add_special_tokens && adds_bos()) out.push_back(*bos_id());
    if (absl::Status s = EncodeTo(text, &out); !s.ok()) return s;
    if (add_special_tokens && add_eos_) out.push_back(*eos_id());
    return out;
  }

  void EncodeOrdinaryTo(std::string_view text, std::vector<int32_t>* out) const override {
    // Encoding fails only for an unloaded model; a loaded one takes any bytes.
    (void)EncodeTo(text, out);
  }

  absl::StatusOr<std::string> Decode(std::span<const int32_t> ids) const override {
    const int n = sp_->piece_size();
    for (const int32_t id : ids) {
      if (id < 0 || id >= n) {
        return absl::InvalidArgumentError(
            absl::StrCat("cannot decode token id ", id, ": no such piece (vocabulary size ", n, ")"));
      }
    }
    std::string text, error;
    if (!sp_->Decode(std::vector<int>(ids.begin(), ids.end()), &text, &error)) {
      return absl::InvalidArgumentError(absl::StrCat(path(), ": decode: ", error));
    }
    return text;
  }

  int32_t vocab_size() const override { return sp_->piece_size(); }
  std::string_view kind() const override { return "sentencepiece"; }

 private:
  absl::Status EncodeTo(std::string_view text, std::vector<int32_t>* out) const {
    std::vector<int> ids;
    std::string error;
    if (!sp_->Encode(text, &ids, &error)) return absl::InvalidArgumentError(absl::StrCat(path(), ": encode: ", error));
    out->insert(out->end(), ids.begin(), ids.end());
    return absl::OkStatus();
  }

  std::unique_ptr<SentencePieceModel> sp_;
  bool add_eos_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TextTokenizer>> LoadSentencePiece(const std::string& path,
                                                                 const TokenizerConfig& config) {
  // Read the file ourselves, for errors that name it the way the rest of io/ does.
  absl::StatusOr<std::string> bytes = ReadFileToString(path);
  if (!bytes.ok()) return bytes.status();
  std::string error;
  std::unique_ptr<SentencePieceModel> sp = SentencePieceModel::Load(*bytes, &error);
  if (sp == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a SentencePiece model (tokenizer.model): ", error));
  }
  auto id_of = [&](const std::string& piece, int fallback, const char* key) -> absl::StatusOr<std::optional<int32_t>> {
    if (piece.empty()) return fallback >= 0 ? std::optional<int32_t>(fallback) : std::nullopt;
    const int id = sp->PieceToId(piece);
    if (id == sp->unk_id() && piece != sp->IdToPiece(id)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tokenizer_config.json's ", key, " \"", piece,
                                                     "\" is not a piece of the model"));
    }
    return std::optional<int32_t>(id);
  };
  absl::StatusOr<std::optional<int32_t>> bos = id_of(config.bos_token, sp->bos_id(), "bos_token");
  if (!bos.ok()) return bos.status();
  absl::StatusOr<std::optional<int32_t>> eos = id_of(config.eos_token, sp->eos_id(), "eos_token");
  if (!eos.ok()) return eos.status();
  return std::unique_ptr<TextTokenizer>(new SentencePieceTokenizer(std::move(sp), path, *bos, *eos,
                                                                   config.add_bos_token.value_or(true),
                                                                   config.add_eos_token.value_or(false)));
}

}  // namespace colossal::io
