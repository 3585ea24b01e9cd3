-- accel.nn.normalization: BatchNorm1d / BatchNorm2d / BatchNorm3d and
-- GroupNorm, with PyTorch's parameters, buffers (running_mean,
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

local function batch_norm_class(name, dims_text, dims_ok)
  local cls = export_class(M, name)

  -- name(num_features, [{eps = 1e-5, momentum = 0.1 (false: cumulative), affine = true,
  --   bias = true, track_running_stats = true, dtype =, device =}])
  function cls:init(num_features, o)
    o = check_options(name, o, {"eps", "momentum", "affine", "bias", "track_running_stats", "dtype", "device"})
    self.num_features = check_count(num_features, name, "num_features")
    self.eps = o.eps or 1e-5
    if o.momentum ~= nil and o.momentum ~= false and type(o.momentum) ~= "number" then
      raise("%s: momentum must be a number or false (PyTorch's None), got %s", name, py(o.momentum))
    end
    self.momentum = o.momentum == nil and 0.1 or o.momentum
    self.affine, self.track_running_stats = o.affine ~= false, o.track_running_stats ~= false
    affine_parameters(self, num_features, o)
    if self.track_running_stats then
      local opts = {dtype = o.dtype, device = o.device}
      self:register_buffer("running_mean", accel.zeros(num_features, opts))
      self:register_buffer("running_var", accel.ones(num_features, opts))
      self:register_buffer("num_batches_tracked", accel.zeros({}, {dtype = accel.int64, device = o.device}))
    else
      self:register_buffer("running_mean", nil)
      self:register_buffer("running_var", nil)
      self:register_buffer("num_batches_tracked", nil)
    end
  end

  function cls:forward(x)
    if not accel.is_tensor(x) or not dims_ok[x:dim()] then
      raise("%s: expected %s input (got %s)", name, dims_text, accel.is_tensor(x) and (x:dim() .. "D input") or type(x))
    end
    local factor = self.momentum or 0
    if self.training and self.track_running_stats then
      accel.no_grad(function() self.num_batches_tracked:add_(1) end)
      if self.momentum == false then factor = 1 / self.num_batches_tracked:item() end
    end
    local use_batch = self.training or self.running_mean == nil
    local keep_running = not self.training or self.track_running_stats
    return F.batch_norm(x, keep_running and self.running_mean or nil, keep_running and self.running_var or nil,
      self.weight, self.bias, use_batch, factor, self.eps)
  end

  function cls:extra_repr()
    return ("%d, eps=%s, momentum=%s, affine=%s, bias=%s, track_running_stats=%s"):format(self.num_features,
      py(self.eps), self.momentum == false and "None" or py(self.momentum), py(self.affine), py(self.bias ~= nil),
      py(self.track_running_stats))
  end
  return cls
end

batch_norm_class("BatchNorm1d", "2D or 3D", {[2] = true, [3] = true})
batch_norm_class("BatchNorm2d", "4D", {[4] = true})
batch_norm_class("BatchNorm3d", "5D", {[5] = true})

local GroupNorm = export_class(M, "GroupNorm")

-- GroupNorm(num_groups, num_channels, [{eps = 1e-5, affine = true, bias = true, dtype =, device =}])
function GroupNorm:init(num_groups, num_channels, o)
  o = check_options("GroupNorm", o, {"eps", "affine", "bias", "dtype", "device"})
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
