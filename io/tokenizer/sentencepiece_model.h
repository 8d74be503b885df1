// colossal::io (internal) — the one translation unit that includes Debian's
// sentencepiece_processor.h.
//
// That header declares `namespace absl { using std::string_view; }` for its
// own use, while Debian's abseil defines a class absl::string_view: the two
// cannot meet in one file. So this wrapper speaks only std types, and its
// .cc includes no abseil header; sentencepiece_tokenizer.cc builds the
// TextTokenizer on it.
//
//   std::string error;
//   std::unique_ptr<SentencePieceModel> model = SentencePieceModel::Load(bytes, &error);
//   std::vector<int> ids;
//   if (!model->Encode("Hello", &ids, &error)) ...
#ifndef COLOSSAL_IO_TOKENIZER_SENTENCEPIECE_MODEL_H_
#define COLOSSAL_IO_TOKENIZER_SENTENCEPIECE_MODEL_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace colossal::io {

class SentencePieceModel {
 public:
  // A model from its serialized bytes (a tokenizer.model file's contents);
  // null with *error set when they are not one.
  static std::unique_ptr<SentencePieceModel> Load(const std::string& serialized, std::string* error);
  ~SentencePieceModel();

  // The library's Encode/Decode; false with *error set on failure.
  bool Encode(std::string_view text, std::vector<int>* ids, std::string* error) const;
  bool Decode(const std::vector<int>& ids, std::string* text, std::string* error) const;

  int piece_size() const;
  int bos_id() const;  // -1 when the model has none
  int eos_id() const;
  int unk_id() const;
  int PieceToId(std::string_view piece) const;  // unk_id() for an unknown piece
  std::string IdToPiece(int id) const;

 private:
  struct Impl;
  explicit SentencePieceModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace colossal::io

#endif  // COLOSSAL_IO_TOKENIZER_SENTENCEPIECE_MODEL_H_
