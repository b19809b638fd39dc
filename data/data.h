// data/: everything between a training loop and its data. Stands on tensor/ alone.
//   dataset.h  Example, Dataset, TensorDataset, MapDataset (map), Subset
//   text.h     CharVocabulary, read_char_text, TextDataset (input/target windows)
//   sampler.h  SequentialSampler, RandomSampler, DistributedSampler
//   collate.h  stack_collate, pad_collate (padding masks), pad_sequences
//   loader.h   DataLoader: batches, shuffle, drop_last, prefetch, resumable position
// Two file formats are components of their own, linked only by those who ask for them:
//   npz/npy.h  NumPy .npy and .npz files (cppgrad::npz; libzip)
//   bpe/bpe.h  BPETokenizer: byte-level BPE, trained or loaded from GPT-2's files (cppgrad::bpe; PCRE2)
#pragma once

#include "collate.h"
#include "dataset.h"
#include "loader.h"
#include "sampler.h"
#include "text.h"
