-- accel.nn.initializers: torch.nn.init, exposed as accel.nn.init (the file
-- nn/init.lua is the accel.nn module itself, hence this file's name).
--
-- Every function fills its tensor in place without recording autograd, draws
-- from accel's generator (reproducible after accel.set_seed) and returns the
-- tensor. PyTorch's positional arguments stay positional; the keyword ones
-- may also come in a trailing options table:
--   init.uniform_(w, -0.1, 0.1)              init.normal_(w, 0, 0.02)
--   init.kaiming_uniform_(w, {a = math.sqrt(5)})
--   init.kaiming_normal_(w, {mode = "fan_out", nonlinearity = "relu"})
--   init.trunc_normal_(w, {std = 0.02})      init.xavier_uniform_(w, {gain = 2})
-- Random values are drawn in float64 for float64 tensors and in float32
-- otherwise (then rounded to the tensor's dtype); trunc_normal_ always draws
-- in float64. constant_ / zeros_ / ones_ / eye_ fill integer and bool
-- tensors too, as PyTorch's.
local accel = require("accel")
local compat = require("accel.compat")
local base = require("accel.nn.module")
local raise = base.raise

local I = {}

-- t is a tensor, and a floating point one unless any_dtype (the fills that
-- PyTorch applies to integer and bool tensors too)
local function check_tensor(t, what, any_dtype)
  if not accel.is_tensor(t) then raise("nn.init.%s: expected a tensor, got %s", what, type(t)) end
  if not any_dtype and not t.dtype.is_floating_point then
    raise("nn.init.%s: expected a floating point tensor, got %s", what, tostring(t.dtype))
  end
end

-- Positional args, or one options table in their place: args(what, a, {"x", "y"}, defaults);
-- the table may hold only the names not given positionally.
local function args(what, given, names, defaults)
  local o = given[1]
  local out = {}
  if type(o) == "table" then
    base.check_options("nn.init." .. what, o, names)
    for i, k in ipairs(names) do
      local v = o[k]
      if v == nil then v = defaults[i] end
      out[i] = v
    end
  else
    for i = 1, #names do
      local v = given[i]
      if type(v) == "table" then -- positional ones followed by options
        base.check_options("nn.init." .. what, v, {compat.unpack(names, i, #names)})
        for j = i, #names do
          local w = v[names[j]]
          if w == nil then w = defaults[j] end
          out[j] = w
        end
        break
      end
      if v == nil then v = defaults[i] end
      out[i] = v
    end
  end
  return compat.unpack(out, 1, #names)
end

-- each named value is a number (PyTorch takes floats here)
local function check_numbers(what, names, ...)
  for i, name in ipairs(names) do
    local v = select(i, ...)
    if type(v) ~= "number" then raise("nn.init.%s: %s must be a number, got %s", what, name, type(v)) end
  end
  return ...
end

-- the bounds PyTorch's uniform_ and normal_ enforce (a NaN fails both)
local function check_range(what, a, b)
  if not (a <= b) then raise("nn.init.%s: expects a [from, to) range, but found from=%g > to=%g", what, a, b) end
end
local function check_std(what, std)
  if not (std >= 0) then raise("nn.init.%s: expects std >= 0, but found std %g", what, std) end
end

local function gen_dtype(t) return t.dtype == accel.float64 and accel.float64 or accel.float32 end

local function fill(t, src)
  accel.no_grad(function() t:copy_(src) end)
  return t
end

-- U(a, b) of t's shape in the generation dtype
local function uniform(t, a, b) return accel.rand(t.shape, {dtype = gen_dtype(t), device = t.device}) * (b - a) + a end
local function normal(t, mean, std) return accel.randn(t.shape, {dtype = gen_dtype(t), device = t.device}) * std + mean end

-- calculate_gain(nonlinearity, [param]): the recommended gain (PyTorch's table).
function I.calculate_gain(nonlinearity, param)
  local linear = {linear = true, conv1d = true, conv2d = true, conv3d = true, conv_transpose1d = true,
                  conv_transpose2d = true, conv_transpose3d = true, sigmoid = true}
  if linear[nonlinearity] then return 1 end
  if nonlinearity == "tanh" then return 5 / 3 end
  if nonlinearity == "relu" then return math.sqrt(2) end
  if nonlinearity == "selu" then return 3 / 4 end
  if nonlinearity == "leaky_relu" then
    local slope = 0.01
    if param ~= nil then
      if type(param) ~= "number" then raise("nn.init.calculate_gain: negative_slope %s is not a valid number", tostring(param)) end
      slope = param
    end
    return math.sqrt(2 / (1 + slope * slope))
  end
  raise("nn.init.calculate_gain: unsupported nonlinearity %s", tostring(nonlinearity))
end

-- fan_in, fan_out of a weight (out, in, *kernel): in * prod(kernel), out * prod(kernel)
function I._calculate_fan_in_and_fan_out(t)
  local nd = t:dim()
  if nd < 2 then
    raise("nn.init: fan in and fan out can not be computed for a tensor with fewer than 2 dimensions (shape %s)", tostring(t.shape))
  end
  local receptive = 1
  for d = 3, nd do receptive = receptive * t:size(d) end
  return t:size(2) * receptive, t:size(1) * receptive
end

local function fan(t, mode)
  local fan_in, fan_out = I._calculate_fan_in_and_fan_out(t)
  if mode == "fan_in" then return fan_in end
  if mode == "fan_out" then return fan_out end
  raise("nn.init: mode %s not supported, please use one of fan_in, fan_out", tostring(mode))
end

function I.uniform_(t, ...)
  check_tensor(t, "uniform_")
  local a, b = check_numbers("uniform_", {"a", "b"}, args("uniform_", {...}, {"a", "b"}, {0, 1}))
  check_range("uniform_", a, b)
  return fill(t, uniform(t, a, b))
end

function I.normal_(t, ...)
  check_tensor(t, "normal_")
  local mean, std = check_numbers("normal_", {"mean", "std"}, args("normal_", {...}, {"mean", "std"}, {0, 1}))
  check_std("normal_", std)
  return fill(t, normal(t, mean, std))
end

-- Phi^-1(p) of a float64 tensor p in (0, 1): Acklam's rational
-- approximation (relative error below 1.2e-9), the tails from min(p, 1 - p).
local ACKLAM_A = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02, 1.383577518672690e+02,
  -3.066479806614716e+01, 2.506628277459239e+00}
local ACKLAM_B = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02, 6.680131188771972e+01,
  -1.328068155288572e+01, 1}
local ACKLAM_C = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00, -2.549732539343734e+00,
  4.374664141464968e+00, 2.938163982698783e+00}
local ACKLAM_D = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00, 1}
local ACKLAM_P_LOW = 0.02425

local function horner(x, c)
  local y = x * c[1] + c[2]
  for i = 3, #c do y = y * x + c[i] end
  return y
end

local function norm_ppf(p)
  local q = p - 0.5
  local r = q * q
  local central = q * horner(r, ACKLAM_A) / horner(r, ACKLAM_B)
  local s = (p:minimum(1 - p):log() * -2):sqrt()
  local tail = horner(s, ACKLAM_C) / horner(s, ACKLAM_D)
  return accel.where(p:lt(ACKLAM_P_LOW), tail, accel.where(p:gt(1 - ACKLAM_P_LOW), -tail, central))
end

-- Phi(x), the standard normal CDF, in float64
local function norm_cdf(x)
  return 0.5 * (1 + accel.tensor(x / math.sqrt(2), {dtype = accel.float64}):erf():item())
end

-- N(mean, std) restricted to [a, b] by inverse-CDF sampling in float64, as
-- PyTorch's: x = mean + std * Phi^-1(U(Phi(alpha), Phi(beta))) clamped to
-- [a, b]. An interval above the mean is drawn as the mirror image of the one
-- below it, whose tail probabilities are small numbers (kept exactly).
function I.trunc_normal_(t, ...)
  check_tensor(t, "trunc_normal_")
  local names = {"mean", "std", "a", "b"}
  local mean, std, a, b = check_numbers("trunc_normal_", names, args("trunc_normal_", {...}, names, {0, 1, -2, 2}))
  if not (a < b) then raise("nn.init.trunc_normal_: need a < b, got a=%g b=%g", a, b) end
  if not (std >= 0) then raise("nn.init.trunc_normal_: std must be >= 0, got %g", std) end
  local lo, hi, sign = (a - mean) / std, (b - mean) / std, 1
  if lo + hi > 0 then lo, hi, sign = -hi, -lo, -1 end
  local pl, ph = norm_cdf(lo), norm_cdf(hi)
  if not (pl < ph) then
    raise("nn.init.trunc_normal_: [a, b] = [%g, %g] holds too little of N(%g, %g^2) to sample from", a, b, mean, std)
  end
  local u = accel.rand(t.shape, {dtype = accel.float64, device = t.device}) * (ph - pl) + pl
  local z = norm_ppf(u:clamp(1e-300, 1 - 2 ^ -53))
  return fill(t, (z * (sign * std) + mean):clamp(a, b))
end

function I.constant_(t, val)
  check_tensor(t, "constant_", true)
  if type(val) ~= "number" and type(val) ~= "boolean" then
    raise("nn.init.constant_: expected a number or a boolean, got %s", type(val))
  end
  accel.no_grad(function() t:fill_(val) end)
  return t
end

function I.zeros_(t) return I.constant_(t, 0) end
function I.ones_(t) return I.constant_(t, 1) end

-- eye_(t): the identity for a 2-D tensor
function I.eye_(t)
  check_tensor(t, "eye_", true)
  if t:dim() ~= 2 then raise("nn.init.eye_: only tensors with 2 dimensions are supported, got shape %s", tostring(t.shape)) end
  local r, c = t:size(1), t:size(2)
  local rows = accel.arange(r, {device = t.device}):unsqueeze(2):expand(r, c)
  local cols = accel.arange(c, {device = t.device}):unsqueeze(1):expand(r, c)
  return fill(t, rows:eq(cols))
end

function I.xavier_uniform_(t, ...)
  check_tensor(t, "xavier_uniform_")
  local gain = check_numbers("xavier_uniform_", {"gain"}, args("xavier_uniform_", {...}, {"gain"}, {1}))
  local fan_in, fan_out = I._calculate_fan_in_and_fan_out(t)
  local bound = gain * math.sqrt(6 / (fan_in + fan_out))
  check_range("xavier_uniform_", -bound, bound)
  return fill(t, uniform(t, -bound, bound))
end

function I.xavier_normal_(t, ...)
  check_tensor(t, "xavier_normal_")
  local gain = check_numbers("xavier_normal_", {"gain"}, args("xavier_normal_", {...}, {"gain"}, {1}))
  local fan_in, fan_out = I._calculate_fan_in_and_fan_out(t)
  local std = gain * math.sqrt(2 / (fan_in + fan_out))
  check_std("xavier_normal_", std)
  return fill(t, normal(t, 0, std))
end

local function kaiming_std(t, a, mode, nonlinearity)
  local f = fan(t, mode)
  if f == 0 then return nil end
  return I.calculate_gain(nonlinearity, a) / math.sqrt(f)
end

-- kaiming_uniform_(t, a=0, mode="fan_in", nonlinearity="leaky_relu"): U(-b, b), b = gain * sqrt(3 / fan)
function I.kaiming_uniform_(t, ...)
  check_tensor(t, "kaiming_uniform_")
  local a, mode, nonlinearity = args("kaiming_uniform_", {...}, {"a", "mode", "nonlinearity"},
    {0, "fan_in", "leaky_relu"})
  local std = kaiming_std(t, a, mode, nonlinearity)
  if not std then return t end -- PyTorch warns and leaves a zero-element tensor alone
  local bound = math.sqrt(3) * std
  return fill(t, uniform(t, -bound, bound))
end

function I.kaiming_normal_(t, ...)
  check_tensor(t, "kaiming_normal_")
  local a, mode, nonlinearity = args("kaiming_normal_", {...}, {"a", "mode", "nonlinearity"},
    {0, "fan_in", "leaky_relu"})
  local std = kaiming_std(t, a, mode, nonlinearity)
  if not std then return t end
  return fill(t, normal(t, 0, std))
end

-- orthogonal_(t, gain=1): (semi-)orthogonal rows or columns of t viewed as
-- (size(1), rest), from a Gram-Schmidt QR of a normal matrix with R's
-- diagonal made positive (PyTorch's recipe).
function I.orthogonal_(t, ...)
  check_tensor(t, "orthogonal_")
  if t:dim() < 2 then raise("nn.init.orthogonal_: only tensors with 2 or more dimensions are supported, got shape %s", tostring(t.shape)) end
  local gain = check_numbers("orthogonal_", {"gain"}, args("orthogonal_", {...}, {"gain"}, {1}))
  if t:numel() == 0 then return t end -- as PyTorch: nothing to fill
  local rows = t:size(1)
  local cols = math.floor(t:numel() / rows)
  local a = accel.randn(rows, cols, {dtype = accel.float64, device = t.device})
  if rows < cols then a = a:t():contiguous() end
  local n, k = a:size(1), a:size(2)
  local q = accel.zeros(n, k, {dtype = accel.float64, device = t.device})
  for j = 1, k do
    local v = a:select(2, j)
    for _ = 1, 2 do -- twice is enough for orthogonality to rounding
      if j > 1 then
        local qj = q:narrow(2, 1, j - 1)
        v = v - qj:matmul(qj:t():matmul(v))
      end
    end
    q:select(2, j):copy_(v / v:norm():item())
  end
  if rows < cols then q = q:t() end
  return fill(t, (q * gain):reshape(t.shape))
end

-- torch.nn.init names accel-lua does not have: reading one is an error naming it
local NOT_PROVIDED = {dirac_ = true, sparse_ = true, uniform = true, normal = true, constant = true,
  xavier_uniform = true, xavier_normal = true, kaiming_uniform = true, kaiming_normal = true, orthogonal = true}

return require("accel.util").not_provided(I, NOT_PROVIDED, "accel.nn.init",
  "docs/api/nn.md lists the initializers (PyTorch's deprecated names without the trailing _ are not kept)")
