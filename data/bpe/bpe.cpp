// BPETokenizer: encoding, decoding and training (the files are in bpe_files.cpp).
#include "data/bpe/bpe.h"

#include <algorithm>
#include <queue>
#include <unordered_set>

#include "runtime/error.h"

namespace cppgrad::data {

static std::string printable(std::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes.substr(0, 40)) out += (c >= 32 && c < 127 && c != '\\') ? std::string(1, char(c)) : fmt::format("\\x{:02x}", int{c});
  if (bytes.size() > 40) out += "...";
  return out;
}

void BPETokenizer::index(const std::string& source) {
  CPPGRAD_CHECK(vocab_size() <= kMaxVocabSize, "BPETokenizer: {}: {} tokens, more than the limit of {}", source,
                vocab_size(), kMaxVocabSize);
  ids_.clear();
  ids_.reserve(tokens_.size());
  byte_ids_.fill(-1);
  for (size_t id = 0; id < tokens_.size(); ++id) {
    const std::string& bytes = tokens_[id];
    CPPGRAD_CHECK(!bytes.empty(), "BPETokenizer: {}: token {} is empty", source, id);
    CPPGRAD_CHECK(static_cast<int64_t>(bytes.size()) <= kMaxTokenBytes,
                  "BPETokenizer: {}: token {} has {} bytes, more than the limit of {}", source, id, bytes.size(),
                  kMaxTokenBytes);
    const auto [it, fresh] = ids_.emplace(bytes, static_cast<int32_t>(id));
    CPPGRAD_CHECK(fresh, "BPETokenizer: {}: tokens {} and {} are both '{}'", source, it->second, id, printable(bytes));
    if (bytes.size() == 1) byte_ids_[static_cast<unsigned char>(bytes[0])] = static_cast<int32_t>(id);
  }
  for (int byte = 0; byte < 256; ++byte)
    CPPGRAD_CHECK(byte_ids_[byte] >= 0, "BPETokenizer: {}: the byte 0x{:02x} has no token (a byte-level vocabulary "
                  "has all 256)", source, byte);
  // Merge k may join only tokens that exist before it: single bytes or tokens an earlier merge made.
  // GPT-2's files keep this order, and it makes the encoder's one-pair-at-a-time merging (below)
  // give exactly GPT-2's result.
  std::vector<bool> made(tokens_.size(), false);
  for (int32_t id : byte_ids_) made[static_cast<size_t>(id)] = true;
  merge_of_pair_.clear();
  merge_of_pair_.reserve(merges_.size());
  for (size_t rank = 0; rank < merges_.size(); ++rank) {
    const auto [left, right] = merges_[rank];
    for (int64_t part : {left, right}) {
      CPPGRAD_CHECK(part >= 0 && part < vocab_size(), "BPETokenizer: {}: merge {} names token {}, outside a "
                    "vocabulary of {}", source, rank, part, vocab_size());
      CPPGRAD_CHECK(made[static_cast<size_t>(part)], "BPETokenizer: {}: merge {} uses '{}' (token {}), which is no "
                    "byte and no earlier merge makes", source, rank, printable(tokens_[static_cast<size_t>(part)]), part);
    }
    const std::string joined = tokens_[static_cast<size_t>(left)] + tokens_[static_cast<size_t>(right)];
    const auto result = ids_.find(joined);
    CPPGRAD_CHECK(result != ids_.end(), "BPETokenizer: {}: merge {} makes '{}', which is not in the vocabulary",
                  source, rank, printable(joined));
    const auto [it, fresh] = merge_of_pair_.emplace(pair_key(left, right), Merge{static_cast<int32_t>(rank), result->second});
    CPPGRAD_CHECK(fresh, "BPETokenizer: {}: merges {} and {} both join '{}' and '{}'", source, it->second.rank, rank,
                  printable(tokens_[static_cast<size_t>(left)]), printable(tokens_[static_cast<size_t>(right)]));
    made[static_cast<size_t>(result->second)] = true;
  }
}

const std::string& BPETokenizer::token_bytes(int64_t id) const {
  CPPGRAD_CHECK(id >= 0 && id < vocab_size(), "BPETokenizer::token_bytes: id {} out of range for a vocabulary of {}",
                id, vocab_size());
  return tokens_[static_cast<size_t>(id)];
}

int64_t BPETokenizer::token_id(std::string_view bytes) const {
  const auto it = ids_.find(std::string(bytes));
  return it == ids_.end() ? -1 : it->second;
}

// GPT-2's rule: while some adjacent pair has a merge, join every occurrence of the pair of lowest
// rank, left to right. Done here one occurrence at a time from a heap of (rank, position), which
// takes n log n steps where GPT-2's loop takes n^2 (a pre-token may be a megabyte of letters). The
// two agree because a merge only makes pairs of higher rank than its own (index() checks it).
void BPETokenizer::encode_pretoken(std::string_view bytes, std::vector<int32_t>& out) const {
  const auto n = static_cast<int32_t>(bytes.size());
  std::vector<int32_t> id(bytes.size()), next(bytes.size()), prev(bytes.size());
  for (int32_t i = 0; i < n; ++i) {
    id[i] = byte_ids_[static_cast<unsigned char>(bytes[i])];
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
  }
  using Candidate = std::pair<int32_t, int32_t>;  // (rank, position of the pair's left token)
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int32_t left) {
    if (left < 0 || next[left] < 0) return;
    const auto it = merge_of_pair_.find(pair_key(id[left], id[next[left]]));
    if (it != merge_of_pair_.end()) heap.push({it->second.rank, left});
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    const auto [rank, left] = heap.top();
    heap.pop();
    const int32_t right = next[left];
    if (id[left] < 0 || right < 0) continue;  // left was absorbed, or is the last token now
    const auto it = merge_of_pair_.find(pair_key(id[left], id[right]));
    if (it == merge_of_pair_.end() || it->second.rank != rank) continue;  // the pair changed since
    id[left] = it->second.result;
    id[right] = -1;
    next[left] = next[right];
    if (next[left] >= 0) prev[next[left]] = left;
    consider(prev[left]);
    consider(left);
  }
  for (int32_t i = 0; i >= 0 && i < n; i = next[i]) out.push_back(id[i]);
}

std::vector<int64_t> BPETokenizer::encode(std::string_view text) const {
  // Words repeat: each distinct pre-token is merged once per call (GPT-2's encoders cache alike).
  std::unordered_map<std::string_view, std::vector<int32_t>> seen;
  std::vector<int64_t> out;
  out.reserve(text.size() / 3);
  for (std::string_view piece : gpt2_pretokens(text)) {
    auto [it, fresh] = seen.try_emplace(piece);
    if (fresh) encode_pretoken(piece, it->second);
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
  return out;
}

std::string BPETokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (int64_t id : ids) {
    CPPGRAD_CHECK(id >= 0 && id < vocab_size(), "BPETokenizer::decode: id {} out of range for a vocabulary of {}", id,
                  vocab_size());
    out += tokens_[static_cast<size_t>(id)];
  }
  return out;
}

// ---- training ----

BPETokenizer BPETokenizer::train(std::string_view text, int64_t vocab_size) {
  CPPGRAD_CHECK(vocab_size >= 256 && vocab_size <= kMaxVocabSize,
                "BPETokenizer::train: vocab_size must be in [256, {}] (the 256 bytes and the merges), got {}",
                kMaxVocabSize, vocab_size);
  BPETokenizer tok;
  for (int byte = 0; byte < 256; ++byte) tok.tokens_.emplace_back(1, static_cast<char>(byte));

  // The distinct pre-tokens with their counts; merges never cross a pre-token's edges.
  std::unordered_map<std::string_view, int64_t> counts;
  for (std::string_view piece : gpt2_pretokens(text)) ++counts[piece];
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> freq;
  for (const auto& [piece, count] : counts) {
    words.emplace_back(piece.begin(), piece.end());
    for (int32_t& symbol : words.back()) symbol = static_cast<unsigned char>(symbol);
    freq.push_back(count);
  }

  std::unordered_map<uint64_t, int64_t> pair_count;               // occurrences, weighted by word counts
  std::unordered_map<uint64_t, std::vector<int32_t>> pair_words;  // words that contain it (may be stale)
  auto add_pairs = [&](int32_t w, int64_t sign, std::unordered_set<uint64_t>* changed) {
    const auto& word = words[static_cast<size_t>(w)];
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const uint64_t key = pair_key(word[i], word[i + 1]);
      pair_count[key] += sign * freq[static_cast<size_t>(w)];
      if (sign > 0) pair_words[key].push_back(w);
      if (changed) changed->insert(key);
    }
  };
  for (int32_t w = 0; w < static_cast<int32_t>(words.size()); ++w) add_pairs(w, +1, nullptr);

  // Most frequent first; among equals the smaller key, i.e. the smaller (left id, right id).
  // Entries go stale when a count changes; a fresh one is pushed then, and stale ones are skipped.
  using Entry = std::pair<int64_t, uint64_t>;
  auto later = [](const Entry& a, const Entry& b) { return a.first != b.first ? a.first < b.first : a.second > b.second; };
  std::priority_queue<Entry, std::vector<Entry>, decltype(later)> best(later);
  for (const auto& [key, count] : pair_count) best.push({count, key});

  std::vector<int64_t> stamp(words.size(), -1);  // the merge that last rewrote each word
  while (tok.vocab_size() < vocab_size && !best.empty()) {
    const auto [count, key] = best.top();
    best.pop();
    const auto current = pair_count.find(key);
    if (current == pair_count.end() || current->second != count || count <= 0) continue;
    const auto left = static_cast<int32_t>(key >> 32), right = static_cast<int32_t>(key & 0xffffffffu);
    std::string joined = tok.tokens_[static_cast<size_t>(left)] + tok.tokens_[static_cast<size_t>(right)];
    if (static_cast<int64_t>(joined.size()) > kMaxTokenBytes) {  // never merged: forget it for good
      pair_count.erase(current);
      continue;
    }
    const auto made = static_cast<int32_t>(tok.tokens_.size());
    const auto merge_index = static_cast<int64_t>(tok.merges_.size());
    tok.tokens_.push_back(std::move(joined));
    tok.merges_.emplace_back(left, right);

    std::unordered_set<uint64_t> changed;
    const std::vector<int32_t> holders = std::move(pair_words[key]);
    pair_words.erase(key);
    for (int32_t w : holders) {
      if (stamp[static_cast<size_t>(w)] == merge_index) continue;  // listed twice
      stamp[static_cast<size_t>(w)] = merge_index;
      auto& word = words[static_cast<size_t>(w)];
      add_pairs(w, -1, &changed);
      std::vector<int32_t> merged;
      merged.reserve(word.size());
      for (size_t i = 0; i < word.size(); ++i) {
        if (i + 1 < word.size() && word[i] == left && word[i + 1] == right) {
          merged.push_back(made);
          ++i;
        } else {
          merged.push_back(word[i]);
        }
      }
      word = std::move(merged);
      add_pairs(w, +1, &changed);
    }
    for (uint64_t k : changed) {
      const auto it = pair_count.find(k);
      if (it == pair_count.end()) continue;
      if (it->second <= 0) {
        pair_count.erase(it);
      } else {
        best.push({it->second, k});
      }
    }
  }
  tok.index("train");
  return tok;
}

}  // namespace cppgrad::data
