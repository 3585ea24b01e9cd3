-- accel.std_sort: C++'s std::sort step for step as libstdc++ implements it
-- (introsort: median-of-3 quicksort down to ranges of 16, heapsort past a
-- depth of 2 log2(n), then one insertion sort). torch's CPU mode sorts each
-- row with it, which is not stable and which NaN (false against everything)
-- leaves partly unsorted: only the same steps give torch's result.
-- sort(list, less) sorts a Lua list in place; positions are 1-based and
-- ranges [first, last) as in the C++.
local S = {}

local THRESHOLD = 16 -- libstdc++'s _S_threshold

local function swap(a, i, j) a[i], a[j] = a[j], a[i] end

local function floor_log2(n)
  local k = 0
  while n >= 2 do n, k = math.floor(n / 2), k + 1 end
  return k
end

-- the median of a[x], a[y], a[z] swapped into a[r] (__move_median_to_first)
local function median_to_first(a, less, r, x, y, z)
  local m
  if less(a[x], a[y]) then
    if less(a[y], a[z]) then m = y elseif less(a[x], a[z]) then m = z else m = x end
  elseif less(a[x], a[z]) then m = x
  elseif less(a[y], a[z]) then m = z
  else m = y end
  swap(a, r, m)
end

-- [first, last) split around a[pivot]; returns the cut (__unguarded_partition)
local function partition(a, less, first, last, pivot)
  while true do
    while less(a[first], a[pivot]) do first = first + 1 end
    last = last - 1
    while less(a[pivot], a[last]) do last = last - 1 end
    if first >= last then return first end
    swap(a, first, last)
    first = first + 1
  end
end

-- a[i] moved down past the larger values before it, with no lower bound
-- (__unguarded_linear_insert)
local function linear_insert(a, less, i)
  local v = a[i]
  while less(v, a[i - 1]) do a[i], i = a[i - 1], i - 1 end
  a[i] = v
end

-- (__insertion_sort): a value below a[first] goes straight to first
local function insertion_sort(a, less, first, last)
  for i = first + 1, last - 1 do
    if less(a[i], a[first]) then
      local v = a[i]
      for j = i, first + 1, -1 do a[j] = a[j - 1] end
      a[first] = v
    else
      linear_insert(a, less, i)
    end
  end
end

-- the heap of len at first (0-based offsets): the hole at hole sifted down
-- to a leaf, then value pushed up from there (__adjust_heap, __push_heap)
local function adjust_heap(a, less, first, hole, len, value)
  local top, child = hole, hole
  while child < math.floor((len - 1) / 2) do
    child = 2 * (child + 1)
    if less(a[first + child], a[first + child - 1]) then child = child - 1 end
    a[first + hole], hole = a[first + child], child
  end
  if len % 2 == 0 and child == math.floor((len - 2) / 2) then
    child = 2 * (child + 1)
    a[first + hole], hole = a[first + child - 1], child - 1
  end
  local parent = math.floor((hole - 1) / 2)
  while hole > top and less(a[first + parent], value) do
    a[first + hole], hole = a[first + parent], parent
    parent = math.floor((hole - 1) / 2)
  end
  a[first + hole] = value
end

-- (__partial_sort(first, last, last)): make the heap, then pop it
local function heap_sort(a, less, first, last)
  local len = last - first
  for parent = math.floor((len - 2) / 2), 0, -1 do adjust_heap(a, less, first, parent, len, a[first + parent]) end
  while last - first > 1 do
    last = last - 1
    local v = a[last]
    a[last] = a[first]
    adjust_heap(a, less, first, 0, last - first, v)
  end
end

local function introsort_loop(a, less, first, last, depth)
  while last - first > THRESHOLD do
    if depth == 0 then return heap_sort(a, less, first, last) end
    depth = depth - 1
    median_to_first(a, less, first, first + 1, first + math.floor((last - first) / 2), last - 1)
    local cut = partition(a, less, first + 1, last, first)
    introsort_loop(a, less, cut, last, depth)
    last = cut
  end
end

function S.sort(a, less)
  local n = #a
  -- the unguarded scans rely on the order to stop inside the list; with NaN
  -- the C++ can read past either end (undefined): here a missing value stops them
  local function lt(x, y) return x ~= nil and y ~= nil and less(x, y) end
  introsort_loop(a, lt, 1, n + 1, 2 * floor_log2(n))
  if n > THRESHOLD then
    insertion_sort(a, lt, 1, THRESHOLD + 1)
    for i = THRESHOLD + 1, n do linear_insert(a, lt, i) end
  else
    insertion_sort(a, lt, 1, n + 1)
  end
  return a
end

return S
