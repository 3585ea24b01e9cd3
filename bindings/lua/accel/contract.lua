-- accel.contract: accel.einsum(equation, a, b, ...), torch.einsum over permute / reshape /
-- sum / matmul (so autograd comes with it). Operands are folded left to
-- right, two at a time: letters only in one operand and not needed later
-- are summed first; the shared ones are batch dims (kept) or contracted
-- (summed by one batched matmul). "..." stands for the leading dims an
-- operand has beyond its letters (broadcast between operands); without
-- "->" the output is "..." then the letters seen once, sorted, as torch's.
-- A letter repeated inside one operand takes that operand's diagonal first
-- ("ii->i", "ii" the trace, "bii->bi"), as torch's.
local accel = require("accel")
local util = require("accel.util")

local raise = util.raise
local M = {}

-- letters of a term as a list, "..." replaced by n_ell ellipsis dims
-- named "1", "2", ... (right-aligned: the last ellipsis dim is always "1")
local function term_dims(term, n_ell)
  local dims, seen = {}, {}
  local before, after = term:match("^(.-)%.%.%.(.*)$")
  local function add(letters)
    for ch in letters:gmatch(".") do
      if not ch:match("%a") then raise("einsum: invalid subscript '%s' in '%s'", ch, term) end
      if seen[ch] then raise("einsum: subscript '%s' repeated in '%s'", ch, term) end
      seen[ch] = true
      dims[#dims + 1] = ch
    end
  end
  if not before then
    add(term)
    return dims
  end
  add(before)
  for k = n_ell, 1, -1 do dims[#dims + 1] = tostring(k) end
  add(after)
  return dims
end

local function letter_count(term) return #(term:gsub("%.%.%.", "")) end

-- the label lists dims[first], dims[first + 1], ... as multiple values
local function unpack_dims(dims, first)
  if first > #dims then return end
  return dims[first], unpack_dims(dims, first + 1)
end

-- checks each label's size agrees across operands (1 broadcasts)
local function check_sizes(sizes, dims, t)
  for i, d in ipairs(dims) do
    local n = t:size(i)
    if sizes[d] and sizes[d] ~= n and sizes[d] ~= 1 and n ~= 1 then
      raise("einsum: subscript '%s' has size %d for one operand and %d for another", d, sizes[d], n)
    end
    if not sizes[d] or sizes[d] == 1 then sizes[d] = n end
  end
end

local function index_of(list, v)
  for i, x in ipairs(list) do
    if x == v then return i end
  end
  return nil
end

-- the labels of the lists given, as a set
local function label_set(...)
  local set = {}
  for _, list in ipairs({...}) do
    for _, d in ipairs(list) do set[d] = true end
  end
  return set
end

local function concat(...)
  local out = {}
  for _, list in ipairs({...}) do
    for _, v in ipairs(list) do out[#out + 1] = v end
  end
  return out
end

local function product(list)
  local n = 1
  for _, v in ipairs(list) do n = n * v end
  return n
end

-- t (labels dims) with the labels not in keep summed out
local function sum_out(t, dims, keep)
  local drop, kept = {}, {}
  for i, d in ipairs(dims) do
    if keep[d] then kept[#kept + 1] = d else drop[#drop + 1] = i end
  end
  if #drop > 0 then t = t:sum(drop) end
  return t, kept
end

-- t (labels dims, each in order) permuted to order, a size-1 dim where it
-- lacks a label
local function arrange(t, dims, order)
  local perm = {}
  for _, d in ipairs(order) do perm[#perm + 1] = index_of(dims, d) end
  if #perm > 1 then t = t:permute(perm) end
  local shape, j = {}, 0
  for k, d in ipairs(order) do
    if index_of(dims, d) then
      j = j + 1
      shape[k] = t:size(j)
    else
      shape[k] = 1
    end
  end
  return t:reshape(shape)
end

-- sizes of dims first .. first + n - 1 of t
local function sizes_of(t, first, n)
  local out = {}
  for i = 1, n do out[i] = t:size(first + i - 1) end
  return out
end

-- the size two sizes that agree (checked) broadcast to: 1 gives way, also to 0
local function broadcast_size(m, n) return m == 1 and n or m end

-- a (labels da) times b (labels db): shared labels in keep are batch dims,
-- the other shared ones are summed by one batched matmul
local function contract(a, da, b, db, keep)
  local in_a, in_b = label_set(da), label_set(db)
  local batch, left, summed, right = {}, {}, {}, {}
  for _, d in ipairs(da) do
    if not in_b[d] then left[#left + 1] = d
    elseif keep[d] then batch[#batch + 1] = d
    else summed[#summed + 1] = d end
  end
  for _, d in ipairs(db) do
    if not in_a[d] then right[#right + 1] = d end
  end
  local A = arrange(a, da, concat(batch, left, summed))
  local B = arrange(b, db, concat(batch, summed, right))
  local nb, nl, ns = #batch, #left, #summed
  local bsz, ssz = {}, {} -- broadcast sizes of the batch and summed dims
  for i = 1, nb do bsz[i] = broadcast_size(A:size(i), B:size(i)) end
  for i = 1, ns do ssz[i] = broadcast_size(A:size(nb + nl + i), B:size(nb + i)) end
  local lsz, rsz = sizes_of(A, nb + 1, nl), sizes_of(B, nb + ns + 1, #right)
  A = A:expand(concat(bsz, lsz, ssz)):reshape(concat(bsz, {product(lsz), product(ssz)}))
  B = B:expand(concat(bsz, ssz, rsz)):reshape(concat(bsz, {product(ssz), product(rsz)}))
  return A:matmul(B):reshape(concat(bsz, lsz, rsz)), concat(batch, left, right)
end

-- the output labels: given after "->", else "..." and the letters used once, sorted
local function output_dims(rhs, terms, n_ell)
  if rhs then return term_dims(rhs, n_ell) end
  local count = {}
  for _, t in ipairs(terms) do
    for ch in t:gsub("%.%.%.", ""):gmatch(".") do count[ch] = (count[ch] or 0) + 1 end
  end
  local once = {}
  for ch, n in pairs(count) do
    if n == 1 then once[#once + 1] = ch end
  end
  table.sort(once)
  local dims = {}
  for k = n_ell, 1, -1 do dims[#dims + 1] = tostring(k) end
  return concat(dims, once)
end

-- the operands' labels (and the number of ellipsis dims), checked against their dims
local function operand_dims(terms, ops)
  local n_ell, dims, sizes = 0, {}, {}
  for i, t in ipairs(ops) do
    if not accel.is_tensor(t) then raise("einsum: operand %d must be a tensor, got %s", i, type(t)) end
    local letters, has_ell = letter_count(terms[i]), terms[i]:find("...", 1, true) ~= nil
    if (has_ell and t:dim() < letters) or (not has_ell and t:dim() ~= letters) then
      raise("einsum: operand %d has %d dims but its subscripts '%s' name %d", i, t:dim(), terms[i], letters)
    end
    dims[i] = term_dims(terms[i], has_ell and t:dim() - letters or 0)
    if has_ell then n_ell = math.max(n_ell, t:dim() - letters) end
    check_sizes(sizes, dims[i], t)
  end
  return dims, n_ell, sizes
end

-- the first letter that occurs twice in term, and the two dims of t (n_ell
-- dims under "...") it names
local function repeated_letter(term, n_ell)
  local positions, d, k = {}, 0, 1
  while k <= #term do
    if term:sub(k, k + 2) == "..." then
      d, k = d + n_ell, k + 3
    else
      local ch = term:sub(k, k)
      d, k = d + 1, k + 1
      positions[ch] = positions[ch] or {}
      table.insert(positions[ch], d)
      if #positions[ch] == 2 then return ch, positions[ch][1], positions[ch][2] end
    end
  end
end

-- operand i with each letter repeated in its term replaced by the diagonal
-- of those two dims (a last dim, the letter moved to the term's end)
local function take_diagonals(term, t, i)
  if not accel.is_tensor(t) then return term, t end
  while true do
    local n_ell = term:find("...", 1, true) and t:dim() - letter_count(term) or 0
    local ch, d1, d2 = repeated_letter(term, n_ell)
    if not ch or d2 > t:dim() then return term, t end
    if t:size(d1) ~= t:size(d2) then
      raise("einsum: subscript %s is repeated for operand %d but the sizes don't match, %d != %d", ch, i, t:size(d2),
        t:size(d1))
    end
    t = t:diagonal(0, d1, d2)
    term = term:gsub(ch, "", 2) .. ch
  end
end

function M.einsum(equation, ...)
  if type(equation) ~= "string" then raise("einsum: the equation must be a string, got %s", type(equation)) end
  local ops = {...}
  if #ops == 1 and type(ops[1]) == "table" and not accel.is_tensor(ops[1]) then ops = ops[1] end -- einsum(eq, {a, b})
  local eq = equation:gsub("%s", "")
  local lhs, rhs = eq:match("^(.-)%->(.*)$")
  local terms = {}
  for term in ((lhs or eq) .. ","):gmatch("([^,]*),") do terms[#terms + 1] = term end
  if #terms ~= #ops then raise("einsum: the equation has %d operands but %d tensors were given", #terms, #ops) end
  local given = {}
  for i = 1, #terms do
    given[i] = terms[i]
    terms[i], ops[i] = take_diagonals(terms[i], ops[i], i)
  end
  local dims, n_ell, sizes = operand_dims(terms, ops)
  local out = output_dims(rhs, given, n_ell)
  for _, d in ipairs(out) do
    if not sizes[d] and not d:match("%d") then raise("einsum: output subscript '%s' appears in no operand", d) end
  end
  -- fold left to right; a label is kept while the output or a later operand has it
  local function needed_after(k) return label_set(out, unpack_dims(dims, k + 1)) end
  local acc, acc_dims = sum_out(ops[1], dims[1], needed_after(1))
  for k = 2, #ops do
    local keep = needed_after(k)
    local b, b_dims = sum_out(ops[k], dims[k], label_set(out, acc_dims, unpack_dims(dims, k + 1)))
    acc, acc_dims = contract(acc, acc_dims, b, b_dims, keep)
  end
  acc, acc_dims = sum_out(acc, acc_dims, label_set(out))
  return arrange(acc, acc_dims, out)
end

return M
