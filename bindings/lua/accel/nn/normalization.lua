-- accel.nn.normalization: BatchNorm1d / BatchNorm2d / BatchNorm3d,
-- SyncBatchNorm (the batch statistics of every process in training),
-- InstanceNorm1d / 2d / 3d (and F.instance_norm) and GroupNorm, with
-- PyTorch's parameters, buffers (running_mean,
-- running_var, num_batches_tracked: the state_dict keys PyTorch writes),
-- options and printed form. Forward passes go through F.batch_norm /
-- F.group_norm. PyTorch's momentum=None (a cumulative average of the batch
-- statistics) is momentum = false here, since a nil option is the default.
local accel = require("accel")
local base = require("accel.nn.module")
local F = require("accel.nn.functional")
local init = require("accel.nn.initializers")

local Parameter, raise, py, export_class = base.Parameter, base.raise, base.pyrepr, base.export_class
local check_options = base.check_options
local torch_args = require("accel.util").torch_args
local util = require("accel.util")

local M = {}

local function check_count(v, what, name) return base.check_integer(v, what, name, 1) end

-- weight (ones) and bias (zeros) of n channels, or nil entries, as affine / bias ask
local function affine_parameters(self, n, o)
  local opts = {dtype = o.dtype, device = o.device}
  if o.affine ~= false then
    self.weight = Parameter(init.ones_(accel.empty(n, opts)))
    if o.bias ~= false then self.bias = Parameter(init.zeros_(accel.empty(n, opts)))
    else self:register_parameter("bias", nil) end
  else
    self:register_parameter("weight", nil)
    self:register_parameter("bias", nil)
  end
end

-- the running statistics buffers of n channels (PyTorch's running_mean, running_var, num_batches_tracked)
local function running_buffers(self, n, o)
  local opts = {dtype = o.dtype, device = o.device}
  self:register_buffer("running_mean", accel.zeros(n, opts))
  self:register_buffer("running_var", accel.ones(n, opts))
  self:register_buffer("num_batches_tracked", accel.zeros({}, {dtype = accel.int64, device = o.device}))
end

-- SyncBatchNorm's statistics: every process's (of the world, or of the
-- process_group, an accel.dist Group) through two differentiable sums over
-- the ranks: the per-channel sum with the count, then the centred sum of
-- squares (exact two-pass variance). Their backward sums the gradients over
-- the ranks, so each input's gradient is that of the sum of every rank's
-- loss, as PyTorch's sync_batch_norm backward computes it.
local ranks_sum -- accel.autograd.Function, made on first use
local function sum_over_ranks(t, group)
  if not ranks_sum then
    local dist = require("accel.dist")
    local function reduced(ctx, v) return dist.all_reduce(v:contiguous():clone(), "sum", {group = ctx.group}) end
    ranks_sum = require("accel.autograd").Function{
      forward = function(ctx, v, g) ctx.group = g; return reduced(ctx, v) end,
      backward = function(ctx, grad) return reduced(ctx, grad) end,
    }
  end
  return ranks_sum(t, group)
end

local function global_batch_stats(group)
  return function(x, dims, c)
    local counted = accel.cat({x:sum(dims), accel.full({1}, x:numel() / c, {dtype = x.dtype, device = x.device})})
    local totals = sum_over_ranks(counted, group)
    local n = totals[c + 1]:item()
    local shape = {1, c}
    for d = 3, x:dim() do shape[d] = 1 end
    local mean = totals:narrow(1, 1, c):reshape(shape) / n
    local var = sum_over_ranks((x - mean):pow(2):sum(dims), group):reshape(shape) / n
    return mean, var, n
  end
end

-- Buffers a state dict may lack (PyTorch added num_batches_tracked later:
-- its loading keeps the module's value and reports nothing missing).
local OPTIONAL_STATE = {num_batches_tracked = true}

-- The process group's size (the world's without one).
local function group_size(group) return require("accel.dist").get_world_size(group) end

local function batch_norm_class(name, dims_text, dims_ok, sync)
  local cls = export_class(M, name)
  rawset(cls, "_optional_state", OPTIONAL_STATE)

  -- name(num_features, [eps = 1e-5], [momentum = 0.1 (false: cumulative)], [affine = true],
  --   [track_running_stats = true], [process_group] (SyncBatchNorm only), [device], [dtype]),
  --   positionally or in an options table, which also takes bias = true
  local args = {"eps:number", "momentum", "affine:bool", "track_running_stats:bool"}
  if sync then args[#args + 1] = "process_group" end
  for _, k in ipairs({"device", "dtype", "bias:bool"}) do args[#args + 1] = k end
  function cls:init(num_features, ...)
    local o = torch_args(name, args, ...)
    local mt = type(o.process_group) == "userdata" and getmetatable(o.process_group)
    if sync and o.process_group ~= nil and not (mt and mt.__name == "accel.dist.Group") then
      raise("%s: process_group must be an accel.dist Group (dist.split_group, dist.node_group), got %s", name,
        py(o.process_group))
    end
    self.process_group = sync and o.process_group or nil
    self.num_features = check_count(num_features, name, "num_features")
    self.eps = o.eps or 1e-5
    if o.momentum ~= nil and o.momentum ~= false and type(o.momentum) ~= "number" then
      raise("%s: momentum must be a number or false (PyTorch's None), got %s", name, py(o.momentum))
    end
    self.momentum = o.momentum == nil and 0.1 or o.momentum
    self.affine, self.track_running_stats = o.affine ~= false, o.track_running_stats ~= false
    affine_parameters(self, num_features, o)
    if self.track_running_stats then
      running_buffers(self, num_features, o)
    else
      self:register_buffer("running_mean", nil)
      self:register_buffer("running_var", nil)
      self:register_buffer("num_batches_tracked", nil)
    end
  end

  function cls:forward(x)
    if not accel.is_tensor(x) or not dims_ok(x:dim()) then
      raise("%s: expected %s input (got %s)", name, dims_text, accel.is_tensor(x) and (x:dim() .. "D input") or type(x))
    end
    if sync and x:size(2) == 0 then raise("%s: number of input channels should be non-zero", name) end
    local factor = self.momentum or 0
    if self.training and self.track_running_stats then
      accel.no_grad(function() self.num_batches_tracked:add_(1) end)
      if self.momentum == false then factor = 1 / self.num_batches_tracked:item() end
    end
    local use_batch = self.training or self.running_mean == nil
    local keep_running = not self.training or self.track_running_stats
    local running_mean, running_var = keep_running and self.running_mean or nil, keep_running and self.running_var or nil
    if sync and self.training and group_size(self.process_group) > 1 then -- as PyTorch: eval mode does not sync
      return F._batch_norm_stats(global_batch_stats(self.process_group), x, running_mean, running_var,
        {weight = self.weight, bias = self.bias, training = true, momentum = factor, eps = self.eps})
    end
    return F.batch_norm(x, running_mean, running_var, self.weight, self.bias, use_batch, factor, self.eps)
  end

  function cls:extra_repr()
    return ("%d, eps=%s, momentum=%s, affine=%s, bias=%s, track_running_stats=%s"):format(self.num_features,
      py(self.eps), self.momentum == false and "None" or py(self.momentum), py(self.affine), py(self.bias ~= nil),
      py(self.track_running_stats))
  end
  return cls
end

batch_norm_class("BatchNorm1d", "2D or 3D", function(d) return d == 2 or d == 3 end)
batch_norm_class("BatchNorm2d", "4D", function(d) return d == 4 end)
batch_norm_class("BatchNorm3d", "5D", function(d) return d == 5 end)
local SyncBatchNorm = batch_norm_class("SyncBatchNorm", "at least 2D", function(d) return d >= 2 end, true)

-- SyncBatchNorm.convert_sync_batchnorm(module, [process_group]): module with
-- every BatchNorm1d / 2d / 3d in it replaced by a SyncBatchNorm holding the
-- same parameters, buffers, options and mode (a BatchNorm module itself comes
-- back as a new SyncBatchNorm), as PyTorch's.
local function convert_sync_batchnorm(module, process_group)
  local out = module
  if base.is_module(module) and (module:isinstance(M.BatchNorm1d) or module:isinstance(M.BatchNorm2d)
      or module:isinstance(M.BatchNorm3d)) then
    out = SyncBatchNorm(module.num_features, {eps = module.eps, momentum = module.momentum, affine = module.affine,
      track_running_stats = module.track_running_stats, bias = module.bias ~= nil, process_group = process_group})
    if module.affine then out.weight, out.bias = module.weight, module.bias end
    if module.track_running_stats then
      out.running_mean, out.running_var = module.running_mean, module.running_var
      out.num_batches_tracked = module.num_batches_tracked
    end
    out.training = module.training
  end
  for child_name, child in module:named_children() do
    out:register_module(child_name, convert_sync_batchnorm(child, process_group))
  end
  return out
end
rawset(SyncBatchNorm, "convert_sync_batchnorm", convert_sync_batchnorm) -- a class function (PyTorch's classmethod)

-- instance_norm(input (N, C, ...), [running_mean], [running_var], [weight], [bias],
--   [use_input_stats = true], [momentum = 0.1], [eps = 1e-5]), positionally or by name:
-- each (sample, channel) plane normalised by its own statistics, computed as
-- PyTorch does, as batch_norm of a (1, N C, ...) view with the running
-- statistics repeated per sample and averaged back over them
function F.instance_norm(x, ...)
  local a = util.torch_args("instance_norm", {"running_mean:tensor", "running_var:tensor", "weight:tensor",
    "bias:tensor", "use_input_stats:bool", "momentum:number", "eps:number"}, ...)
  if not accel.is_tensor(x) or x:dim() < 3 then
    raise("instance_norm: expected an input of at least 3 dims (N, C, ...), got %s",
      accel.is_tensor(x) and tostring(x.shape) or type(x))
  end
  local n, c = x:size(1), x:size(2)
  local use_input = a.use_input_stats ~= false
  if use_input and x:numel() / (n * c) <= 1 then
    raise("instance_norm: Expected more than 1 spatial element when training, got input size %s", tostring(x.shape))
  end
  local shape = {1, n * c}
  for d = 3, x:dim() do shape[d] = x:size(d) end
  local function per_sample(t) return t and t["repeat"](t, n) or nil end
  local rm, rv = per_sample(a.running_mean), per_sample(a.running_var)
  local y = F.batch_norm(x:reshape(shape), rm, rv, per_sample(a.weight), per_sample(a.bias), use_input,
    a.momentum or 0.1, a.eps or 1e-5)
  if use_input and rm then
    accel.no_grad(function()
      a.running_mean:copy_(rm:view(n, c):mean(1))
      a.running_var:copy_(rv:view(n, c):mean(1))
    end)
  end
  return y:view(x.shape)
end

local function instance_norm_class(name, dims)
  local cls = export_class(M, name)
  rawset(cls, "_optional_state", OPTIONAL_STATE)

  -- name(num_features, [eps = 1e-5], [momentum = 0.1], [affine = false], [track_running_stats = false],
  --   [{dtype =, device =}]), positionally or by name
  function cls:init(num_features, ...)
    local o = util.torch_args(name, {"eps:number", "momentum:number", "affine:bool", "track_running_stats:bool",
      "bias:bool", "dtype", "device"}, ...)
    self.num_features = check_count(num_features, name, "num_features")
    self.eps, self.momentum = o.eps or 1e-5, o.momentum or 0.1
    self.affine, self.track_running_stats = o.affine == true, o.track_running_stats == true
    affine_parameters(self, num_features, {affine = self.affine, bias = o.bias, dtype = o.dtype, device = o.device})
    if self.track_running_stats then running_buffers(self, num_features, o) end
  end

  -- forward(x (N, C, ...) or unbatched (C, ...))
  function cls:forward(x)
    if not accel.is_tensor(x) or (x:dim() ~= dims + 1 and x:dim() ~= dims + 2) then
      raise("%s: expected %dD or %dD input (got %s)", name, dims + 1, dims + 2,
        accel.is_tensor(x) and (x:dim() .. "D input") or type(x))
    end
    local batched = x:dim() == dims + 2
    local xb = batched and x or x:unsqueeze(1)
    if self.affine and xb:size(2) ~= self.num_features then
      raise("%s: expected input's size at dim %d to match num_features (%d), but got: %d", name, batched and 2 or 1,
        self.num_features, xb:size(2))
    end
    local y = F.instance_norm(xb, self.running_mean, self.running_var, self.weight, self.bias,
      self.training or not self.track_running_stats, self.momentum, self.eps)
    return batched and y or y:squeeze(1)
  end

  function cls:extra_repr()
    return ("%d, eps=%s, momentum=%s, affine=%s, bias=%s, track_running_stats=%s"):format(self.num_features,
      py(self.eps), py(self.momentum), py(self.affine), py(self.bias ~= nil), py(self.track_running_stats))
  end
end

instance_norm_class("InstanceNorm1d", 1)
instance_norm_class("InstanceNorm2d", 2)
instance_norm_class("InstanceNorm3d", 3)

-- local_response_norm(input (N, C, ...), size, [alpha = 1e-4], [beta = 0.75], [k = 1]): input /
-- (k + alpha / size * sum of input^2 over the channels c - size // 2 .. c + (size - 1) // 2)^beta, the
-- window zero-padded at the ends (PyTorch's average pool, padding counted)
function F.local_response_norm(input, size, ...)
  local a = util.torch_args("local_response_norm", {"alpha:number", "beta:number", "k:number"}, ...)
  if not accel.is_tensor(input) or input:dim() < 3 then
    raise("local_response_norm: Expected 3D or higher dimensionality input (got %s)",
      accel.is_tensor(input) and (input:dim() .. " dimensions") or type(input))
  end
  if type(size) ~= "number" or size < 1 or size ~= math.floor(size) then
    raise("local_response_norm: size must be a positive integer, got %s", py(size))
  end
  if input:numel() == 0 then return input:clone() end
  local sq, c = input * input, input:size(2)
  -- torch averages 4-D and larger inputs with avg_pool3d, on its autocast float32 list (CPU)
  if input:dim() >= 4 then sq = require("accel.amp").fp32_input(sq) end
  local before, after = math.floor(size / 2), math.floor((size - 1) / 2)
  local pads = {}
  for _ = 3, input:dim() do pads[#pads + 1], pads[#pads + 2] = 0, 0 end
  pads[#pads + 1], pads[#pads + 2] = before, after -- (F.pad lists the last dim first: channels come last here)
  local padded = F.pad(sq, pads)
  local window = padded:narrow(2, 1, c)
  for j = 2, size do window = window + padded:narrow(2, j, c) end
  local div = (window * ((a.alpha or 1e-4) / size) + (a.k or 1)):pow(a.beta or 0.75)
  return input / div
end

local LocalResponseNorm = export_class(M, "LocalResponseNorm")

-- LocalResponseNorm(size, [alpha = 1e-4], [beta = 0.75], [k = 1])
function LocalResponseNorm:init(size, ...)
  local a = util.torch_args("LocalResponseNorm", {"alpha:number", "beta:number", "k:number"}, ...)
  self.size = check_count(size, "LocalResponseNorm", "size")
  self.alpha, self.beta, self.k = a.alpha or 1e-4, a.beta or 0.75, a.k or 1.0
end

function LocalResponseNorm:forward(x) return F.local_response_norm(x, self.size, self.alpha, self.beta, self.k) end

function LocalResponseNorm:extra_repr()
  return ("%d, alpha=%s, beta=%s, k=%s"):format(self.size, py(self.alpha), py(self.beta), py(self.k))
end

local GroupNorm = export_class(M, "GroupNorm")

-- GroupNorm(num_groups, num_channels, [eps = 1e-5], [affine = true], [device], [dtype]), positionally or
-- in an options table, which also takes bias = true
function GroupNorm:init(num_groups, num_channels, ...)
  local o = torch_args("GroupNorm", {"eps:number", "affine:bool", "device", "dtype", "bias:bool"}, ...)
  self.num_groups = check_count(num_groups, "GroupNorm", "num_groups")
  self.num_channels = check_count(num_channels, "GroupNorm", "num_channels")
  if num_channels % num_groups ~= 0 then raise("GroupNorm: num_channels must be divisible by num_groups") end
  self.eps, self.affine = o.eps or 1e-5, o.affine ~= false
  affine_parameters(self, num_channels, o)
end

function GroupNorm:forward(x) return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps) end

function GroupNorm:extra_repr()
  return ("%d, %d, eps=%s, affine=%s, bias=%s"):format(self.num_groups, self.num_channels, py(self.eps),
    py(self.affine), py(self.bias ~= nil))
end

return M
