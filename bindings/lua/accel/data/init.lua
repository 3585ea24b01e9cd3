-- accel.data: datasets, the DataLoader and data-set files (DESIGN §2 "data").
--
--   local data = accel.data
--   local ds = data.TensorDataset(x, y)                 -- #ds, ds:get(i) -> x[i], y[i]
--   local loader = data.DataLoader(ds, {batch_size = 32, shuffle = true})
--   for xb, yb in loader:iter() do ... end              -- one pass = one epoch
--
-- Datasets (accel/data/dataset.lua): anything with #ds and ds:get(i)
-- (1-based) returning one sample as one value or several values (fields);
-- optionally ds:get_batch(indices) (a new int64 tensor of 0-based
-- positions, which it may change) returning the collated fields, used instead of get + collate when the
-- loader has no collate_fn. data.Dataset{len = n | fn, get = fn(i)};
-- data.TensorDataset(t1, ...) (all tensors share dim 1; its batches are one
-- index_select per tensor); data.Subset, data.ConcatDataset and
-- data.random_split (accel/data/subsets.lua).
--
-- DataLoader(dataset, {batch_size = 1, shuffle = false, drop_last = false,
-- seed = nil, collate_fn = nil}) (num_workers, pin_memory,
-- persistent_workers and prefetch_factor are accepted and ignored; other
-- unknown options are errors). Decisions where PyTorch/Accelerate leave a
-- choice:
--  * Order: epoch e's order is a permutation of the samples that depends
--    only on (seed, e): Philox4x32-10 keyed by the seed, from block e * 2^40
--    (rng_randperm_at, core/rng.c); the global generator is neither read nor
--    advanced. Without a seed, a shuffling loader draws one from the global
--    generator once, at construction (so accel.set_seed(n) before building
--    it makes runs repeat); a loader without shuffle draws nothing.
--  * Epochs: the loader starts at epoch 0; a pass of iter() that runs to its
--    end advances the epoch by one; a pass left early (break) does not, and
--    the next iter() starts that epoch again (as Accelerate's loaders).
--    set_epoch(e) selects epoch e (a no-op when e is already current, so a
--    resumed position survives the usual per-epoch set_epoch call).
--  * Position: state_dict() -> {epoch = e, samples = s}, s the samples of
--    epoch e's global order consumed so far by all shards together (k local
--    batches on N shards: k * N * batch_size, or k * batch_size under
--    split_batches; the whole epoch, n, once a pass has yielded its last
--    batch); load_state_dict(s) makes the next iter() deal the order from
--    sample s + 1 on, with this loader's own layout (any number of shards),
--    and refuses a position past the end or not a whole number of batches.
--    The older {epoch = e, batches = k} (k batches of this loader's own
--    layout) is still accepted. See docs/data-positions.md.
--    skip_first_batches(n) returns a loader sharing this one's state
--    whose next pass starts at batch n + 1 of the current epoch (later
--    passes are whole epochs), so checkpoints taken through either see the
--    same position. Both are O(1): nothing before the start is loaded.
--    #loader counts the batches per pass (for a skip loader, of its next).
--    end_of_dataloader() is true while the last batch of a pass is in use.
--  * Collation (accel/data/collate.lua): sample fields are collated across
--    the batch (tensors stacked on a new dim 1, numbers to a 1-D int64 or
--    float32 tensor, ...); a dataset returning several values yields several
--    batch values. collate_fn(batch) gets the list of samples, each the
--    value get(i) returned or, for several values, the list of them; what
--    it returns is yielded.
--  * shard(rank, world_size, {even_batches = true, split_batches = false})
--    (rank 0-based) -> this rank's loader over the same global order: rank r
--    gets global batches r, r + N, r + 2N, ...; even_batches pads the pass
--    by wrapping to the start of the order so every rank gets the same
--    number of full batches; split_batches gives rank r the r-th of N equal
--    slices of every global batch instead (batch_size % N must be 0). With
--    drop_last only whole rounds of N full batches are kept. N = 1 changes
--    nothing. These are Accelerate's BatchSamplerShard rules.
--  * Readable fields: dataset, batch_size (as given: with split_batches the
--    global batch), shuffle, drop_last, seed, collate_fn, process_index,
--    num_processes, even_batches, split_batches.
--
-- Files (accel/data/files.lua, C readers in core/): read_idx(path) (IDX,
-- plain or gzip), TokenFile(path, {block_size =, stride = block_size})
-- (llm.c .bin, memory-mapped; sample i is x = ids [(i-1)*stride + 1 ..
-- + block_size], y = x shifted by one, int64; tf.tokens is the mapped token
-- bytes as a uint8 (ntok, 2) tensor, since accel has no uint16 dtype, and
-- tf:ids(first, count) the ids as int64), read_csv(path, opts) -> tensor,
-- names and CSV(path, {header = true, delimiter = ",", columns = nil,
-- dtype = accel.float32}) -> a TensorDataset: columns lists the fields,
-- each a column (name or 1-based index; a 1-D field) or a list of columns
-- (a 2-D field); nil = one field of all columns; dtype is one dtype or a
-- list, one per field; ds.columns holds the header names.
-- fashion_mnist_dir() -> the directory of Debian's dataset-fashion-mnist
-- ($FASHION_MNIST_DIR first) or nil.
local dataset = require("accel.data.dataset")
local collate = require("accel.data.collate")
local DataLoader = require("accel.data.loader")
local files = require("accel.data.files")
local subsets = require("accel.data.subsets")

local data = {
  Dataset = dataset.Dataset,
  TensorDataset = dataset.TensorDataset,
  Subset = subsets.Subset,
  ConcatDataset = subsets.ConcatDataset,
  random_split = subsets.random_split,
  DataLoader = DataLoader,
  default_collate = collate.default_collate,
  read_idx = files.read_idx,
  TokenFile = files.TokenFile,
  read_csv = files.read_csv,
  CSV = files.CSV,
  fashion_mnist_dir = files.fashion_mnist_dir,
}

-- torch.utils.data names accel-lua does not have: reading one is an error
-- naming it (the DataLoader takes no sampler: shuffle, seed and shard do
-- their work)
local NOT_PROVIDED = {}
for name in ([[Sampler SequentialSampler RandomSampler SubsetRandomSampler WeightedRandomSampler BatchSampler
  DistributedSampler IterableDataset ChainDataset StackDataset get_worker_info default_convert]]):gmatch("%S+") do
  NOT_PROVIDED[name] = true
end

return require("accel.util").not_provided(data, NOT_PROVIDED, "accel.data",
  "docs/api/data.md lists what accel.data has; the DataLoader shuffles and shards without samplers")
