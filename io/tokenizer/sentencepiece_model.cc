// No abseil header may be included here (sentencepiece_model.h says why).
#include "io/tokenizer/sentencepiece_model.h"

#include <utility>

#include "sentencepiece_processor.h"

namespace colossal::io {

struct SentencePieceModel::Impl {
  sentencepiece::SentencePieceProcessor processor;
};

SentencePieceModel::SentencePieceModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SentencePieceModel::~SentencePieceModel() = default;

std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(const std::string& serialized, std::string* error) {
  auto impl = std::make_unique<Impl>();
  const sentencepiece::util::Status s = impl->processor.LoadFromSerializedProto(serialized);
  if (!s.ok()) {
    *error = s.ToString();
    return nullptr;
  }
  return std::unique_ptr<SentencePieceModel>(new SentencePieceModel(std::move(impl)));
}

bool SentencePieceModel::Encode(std::string_view text, std::vector<int>* ids, std::string* error) const {
  const sentencepiece::util::Status s = impl_->processor.Encode(text, ids);
  if (!s.ok()) *error = s.ToString();
  return s.ok();
}

bool SentencePieceModel::Decode(const std::vector<int>& ids, std::string* text, std::string* error) const {
  const sentencepiece::util::Status s = impl_->processor.Decode(ids, text);
  if (!s.ok()) *error = s.ToString();
  return s.ok();
}

int SentencePieceModel::piece_size() const { return impl_->processor.GetPieceSize(); }
int SentencePieceModel::bos_id() const { return impl_->processor.bos_id(); }
int SentencePieceModel::eos_id() const { return impl_->processor.eos_id(); }
int SentencePieceModel::unk_id() const { return impl_->processor.unk_id(); }
int SentencePieceModel::PieceToId(std::string_view piece) const { return impl_->processor.PieceToId(piece); }
std::string SentencePieceModel::IdToPiece(int id) const { return impl_->processor.IdToPiece(id); }

}  // namespace colossal::io
