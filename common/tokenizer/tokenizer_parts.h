// The pieces a Tokenizer is assembled from (internal to the tokenizer).
#ifndef TANDEM_COMMON_TOKENIZER_TOKENIZER_PARTS_H_
#define TANDEM_COMMON_TOKENIZER_TOKENIZER_PARTS_H_

#include <memory>
#include <string>
#include <vector>

#include "common/tokenizer/added_tokens.h"
#include "common/tokenizer/bpe.h"
#include "common/tokenizer/decoder.h"
#include "common/tokenizer/normalizer.h"
#include "common/tokenizer/pretokenizer.h"
#include "common/tokenizer/vocab.h"

namespace tandem::tok {

struct TokenizerParts {
  std::unique_ptr<Vocab> vocab;
  std::unique_ptr<BpeModel> model;         // uses *vocab
  std::unique_ptr<Normalizer> normalizer;  // never null once assembled
  std::unique_ptr<PreTokenizer> pretokenizer;
  std::vector<AddedToken> added_tokens;  // turned into `matcher` by FromParts
  AddedTokenMatcher matcher;
  DecoderConfig decoder_config;
  PieceDecoder decoder;  // built by FromParts

  std::vector<int32_t> prefix_ids;  // added around a sequence when add_bos
  std::vector<int32_t> suffix_ids;
  int32_t bos_id = -1;
  std::vector<int32_t> eos_ids;
  std::string chat_template;
};

// Names llama.cpp (and we) treat as end-of-generation tokens besides EOS.
bool IsEndOfGenerationName(const std::string& piece);

}  // namespace tandem::tok

#endif  // TANDEM_COMMON_TOKENIZER_TOKENIZER_PARTS_H_
