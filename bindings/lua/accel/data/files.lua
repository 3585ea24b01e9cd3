-- accel.data.files: data sets read from files. The parsing is C
-- (core/io/idx.c, core/io/csv.c, core/io/tokenfile.c through accel._C); this file
-- checks options and shapes the results into tensors and datasets.
local accel = require("accel")
local C = accel._C
local U = require("accel.data.util")
local dataset = require("accel.data.dataset")

local M = {}

local function check_path(path, what)
  if type(path) ~= "string" then U.failf("%s: expected a file path (string), got %s", what, type(path)) end
  return path
end

-- ---- IDX (the MNIST family) ----

function M.read_idx(path) return C.read_idx(check_path(path, "read_idx")) end

-- Debian's dataset-fashion-mnist installs the four IDX files here.
local FASHION_MNIST_DIRS = {"/usr/share/datasets/fashion-mnist"}

local function readable(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

-- The Fashion-MNIST directory ($FASHION_MNIST_DIR, else Debian's), or nil.
function M.fashion_mnist_dir()
  local dirs = {os.getenv("FASHION_MNIST_DIR")}
  for _, d in ipairs(FASHION_MNIST_DIRS) do dirs[#dirs + 1] = d end
  for _, d in ipairs(dirs) do
    if d ~= "" and readable(d .. "/t10k-images-idx3-ubyte.gz") then return d end
  end
  return nil
end

-- ---- llm.c token files ----

local TokenFile = {}
TokenFile.__index = U.dataset_index(TokenFile, "TokenFile")
TokenFile.__name = "accel.data.TokenFile"

function TokenFile:__len()
  local T, n = self.block_size, self.num_tokens
  if n < T + 1 then return 0 end
  return math.floor((n - 1 - T) / self.stride) + 1
end

local function check_index(self, i) return U.check_index("TokenFile", i, TokenFile.__len(self)) end

-- Sample i: x = ids of block i, y = the same block shifted by one (int64, T).
function TokenFile:get(i)
  i = check_index(self, i)
  local x, y = C.token_blocks(self.tokens, accel.tensor({(i - 1) * self.stride}, {device = "cpu"}), self.block_size)
  return x:view(-1), y:view(-1)
end

function TokenFile:get_batch(idx)
  return C.token_blocks(self.tokens, idx * self.stride, self.block_size)
end

-- ids(first, count): token ids first .. first + count - 1 (1-based positions) as int64.
function TokenFile:ids(first, count)
  U.check_int(first, 1, "TokenFile:ids: first")
  U.check_int(count, 0, "TokenFile:ids: count")
  return C.token_ids(self.tokens, first - 1, count)
end

function M.TokenFile(path, opts)
  check_path(path, "TokenFile")
  opts = U.check_opts(opts, {block_size = true, stride = true}, nil, "TokenFile")
  if opts.block_size == nil then U.fail("TokenFile: block_size is required (tokens per sample)") end
  local T = U.check_int(opts.block_size, 1, "TokenFile: block_size")
  local stride = U.check_int(opts.stride == nil and T or opts.stride, 1, "TokenFile: stride")
  local tokens = C.token_map(path)
  if tokens:size(1) < T + 1 then
    U.failf("TokenFile: %s holds %d tokens: a sample needs block_size + 1 = %d (x and y, shifted by one)", path,
      tokens:size(1), T + 1)
  end
  return setmetatable({path = path, tokens = tokens, num_tokens = tokens:size(1), block_size = T, stride = stride}, TokenFile)
end

-- ---- CSV ----

-- C.csv_read(file, specs) (one tensor per field), its dtype errors naming what read the file
local function read_columns(what, path, file, specs)
  local res = U.pack(pcall(C.csv_read, file, specs))
  if res[1] then return U.unpack(res, 2, res.n) end
  res = res[2]
  local msg = tostring(res)
  if msg:find("dtype", 1, true) and not msg:find(path, 1, true) then
    U.failf("%s: %s: %s", what, path, (msg:gsub("^.-:%d+: ", "")))
  end
  error(res, 0)
end

local CSV_OPTS = {header = true, delimiter = true, dtype = true}

local function csv_args(path, opts, what, known)
  check_path(path, what)
  opts = U.check_opts(opts, known, nil, what)
  local header = opts.header
  if header == nil then header = true end
  if type(header) ~= "boolean" then U.failf("%s: header must be true or false, got %s", what, tostring(header)) end
  local delim = opts.delimiter or ","
  if type(delim) ~= "string" or #delim ~= 1 then U.failf("%s: delimiter must be one character, got %s", what, tostring(delim)) end
  return opts, header, delim
end

-- read_csv(path, {header = true, delimiter = ",", dtype = accel.float32})
-- -> tensor (rows, columns), column names (list, or nil without header).
-- Every column is read as dtype (integer dtypes exactly; see core/io/csv.c).
function M.read_csv(path, opts)
  local header, delim
  opts, header, delim = csv_args(path, opts, "read_csv", CSV_OPTS)
  local file, ncols, names = C.csv_open(path, delim, header)
  local all = {}
  for k = 1, ncols do all[k] = k - 1 end
  return read_columns("read_csv", path, file, {{cols = all, dtype = opts.dtype or accel.float32}}), names
end

-- 0-based column of a name or 1-based index.
local function column(c, names, ncols, path)
  if type(c) == "string" then
    if not names then U.failf("CSV: %s: column '%s' asked by name but the file is read without a header", path, c) end
    local found = {}
    for k, name in ipairs(names) do
      if name == c then found[#found + 1] = k end
    end
    if #found == 1 then return found[1] - 1 end
    if #found > 1 then
      U.failf("CSV: %s: column '%s' is ambiguous: the header has it at columns %s; give its index", path, c,
        table.concat(found, " and "))
    end
    U.failf("CSV: %s has no column '%s' (columns: %s)", path, c, table.concat(names, ", "))
  end
  local k = U.to_int(c) -- 3.0 is column 3
  if not (k and k >= 1 and k <= ncols) then
    U.failf("CSV: %s: column %s is out of range 1..%d", path, tostring(c), ncols)
  end
  return k - 1
end

local function field_dtype(dtype, f)
  if type(dtype) == "table" and not getmetatable(dtype) then return dtype[f] or accel.float32 end
  return dtype or accel.float32
end

-- CSV(path, {header = true, delimiter = ",", columns = nil, dtype = accel.float32})
-- -> a TensorDataset; see init.lua for columns and dtype. Only the selected
-- columns are read as numbers (each as its field's dtype, integer dtypes
-- exactly); the others may hold any text.
function M.CSV(path, opts)
  local header, delim
  opts, header, delim = csv_args(path, opts, "CSV", {header = true, delimiter = true, dtype = true, columns = true})
  local file, ncols, names = C.csv_open(path, delim, header)
  local cols = opts.columns
  if cols == nil then -- one field: every column
    local all = {}
    for k = 1, ncols do all[k] = k end
    cols = {all}
  end
  if type(cols) ~= "table" or #cols == 0 then U.fail("CSV: columns must be a non-empty list of column names, indices or lists of them") end
  local specs = {}
  for f, spec in ipairs(cols) do
    if type(spec) == "table" then
      if #spec == 0 then U.failf("CSV: %s: columns[%d] is an empty list", path, f) end
      local idx = {}
      for k, c in ipairs(spec) do idx[k] = column(c, names, ncols, path) end
      specs[f] = {cols = idx, dtype = field_dtype(opts.dtype, f)}
    else
      specs[f] = {cols = {column(spec, names, ncols, path)}, dtype = field_dtype(opts.dtype, f), vector = true}
    end
  end
  if type(opts.dtype) == "table" and not getmetatable(opts.dtype) and #opts.dtype > #specs then
    U.failf("CSV: %s: dtype lists %d dtypes for %d fields (columns)", path, #opts.dtype, #specs)
  end
  local fields = {read_columns("CSV", path, file, specs)}
  local ds = dataset.TensorDataset(U.unpack(fields, 1, #fields))
  ds.columns = names
  return ds
end

-- tf.get(1): "TokenFile.get: call it as obj:get(...)"
require("accel.util").check_methods(TokenFile, "TokenFile")

return M
