-- accel.nn.sequence: layers over sequences: Conv1d and the recurrent RNN,
-- LSTM and GRU and their cells, with PyTorch's parameter names (weight_ih_l0,
-- weight_hh_l0_reverse, ...), shapes, gate order and initialisation
-- (uniform in +-1/sqrt(hidden_size)). The recurrences are written with
-- linear / sigmoid / tanh, so autograd comes with them: the input
-- projection of every step runs as one matmul, the hidden one per step.
-- A forward returns output, then LSTM's {h_n, c_n} (Python's tuple as a
-- list) or RNN / GRU's h_n; the initial state is given the same way.
-- RNNCell / LSTMCell / GRUCell run one step: h' (LSTMCell: h', c' as two
-- values, its state given as {h, c}).
-- Loaded on first use of one of its classes (accel.nn).
local accel = require("accel")
local base = require("accel.nn.module")
local F = require("accel.nn.functional")
local init = require("accel.nn.initializers")
local util = require("accel.util")

local Parameter, raise, py, export_class = base.Parameter, base.raise, base.pyrepr, base.export_class

local M = {}

local function positive(v, what, name) return base.check_integer(v, what, name, 1) end

-- ---- Conv1d ----

local Conv1d = export_class(M, "Conv1d")

-- Conv1d(in_channels, out_channels, kernel_size, [stride = 1], [padding = 0], [dilation = 1], [groups = 1],
--   [bias = true], [padding_mode = "zeros"], [device], [dtype]), the optional ones positionally or in an
-- options table; kernel_size, stride, padding, dilation: integers or lists of one; weight {out, in / groups, k}
function Conv1d:init(in_channels, out_channels, kernel_size, ...)
  local o = require("accel.util").torch_args("Conv1d", require("accel.nn.layers")._CONV_ARGS, ...)
  self.in_channels = positive(in_channels, "Conv1d", "in_channels")
  self.out_channels = positive(out_channels, "Conv1d", "out_channels")
  base.not_in_options(kernel_size, "Conv1d", "kernel_size")
  -- each an integer or a list of one (PyTorch's (k,)), kept as the integer
  local function setting(name, v, low) return F._conv1d_setting("Conv1d", name, v, low) end
  self.kernel_size = setting("kernel_size", kernel_size, 1)
  self.stride, self.dilation = setting("stride", o.stride or 1, 1), setting("dilation", o.dilation or 1, 1)
  self.padding = setting("padding", o.padding or 0, 0)
  if type(self.padding) == "string" then
    if self.padding ~= "same" and self.padding ~= "valid" then
      raise("Conv1d: invalid padding string '%s', should be one of 'valid', 'same'", self.padding)
    end
    if self.padding == "same" and self.stride ~= 1 then
      raise("Conv1d: padding='same' is not supported for strided convolutions")
    end
  end
  self.groups = positive(o.groups or 1, "Conv1d", "groups")
  self.padding_mode = require("accel.nn.layers")._padding_mode("Conv1d", o.padding_mode)
  if in_channels % self.groups ~= 0 or out_channels % self.groups ~= 0 then
    raise("Conv1d: in_channels (%d) and out_channels (%d) must be divisible by groups (%d)", in_channels, out_channels, self.groups)
  end
  local opts = {dtype = o.dtype, device = o.device}
  self.weight = Parameter(accel.empty({out_channels, in_channels / self.groups, self.kernel_size}, opts))
  if o.bias ~= false then self.bias = Parameter(accel.empty(out_channels, opts)) else self:register_parameter("bias", nil) end
  self:reset_parameters()
end

-- PyTorch's: kaiming_uniform(a = sqrt(5)), bias in +-1/sqrt(fan_in), as Linear's and Conv2d's
Conv1d.reset_parameters = require("accel.nn.layers").Linear.reset_parameters

function Conv1d:forward(x)
  local padding = self.padding
  if self.padding_mode ~= "zeros" then
    local pads = require("accel.nn.layers")._mode_pads(type(padding) == "string" and padding or {padding},
      {self.kernel_size}, {self.dilation})
    x, padding = F.pad(x, pads, self.padding_mode), 0
  end
  return F.conv1d(x, self.weight, self.bias, {stride = self.stride, padding = padding, dilation = self.dilation,
    groups = self.groups})
end

function Conv1d:extra_repr()
  local s = ("%d, %d, kernel_size=(%d,), stride=(%d,)"):format(self.in_channels, self.out_channels, self.kernel_size,
    self.stride)
  if self.padding ~= 0 then s = s .. (type(self.padding) == "string" and ", padding=" .. self.padding or (", padding=(%d,)"):format(self.padding)) end
  if self.dilation ~= 1 then s = s .. (", dilation=(%d,)"):format(self.dilation) end
  if self.groups ~= 1 then s = s .. ", groups=" .. self.groups end
  if self.bias == nil then s = s .. ", bias=False" end
  if self.padding_mode ~= "zeros" then s = s .. ", padding_mode=" .. self.padding_mode end
  return s
end

-- ---- RNN / LSTM / GRU ----

local GATES = {RNN = 1, LSTM = 4, GRU = 3}
-- PyTorch's positional order: RNN takes nonlinearity after num_layers
local OPTIONS = {"num_layers:int", "bias:bool", "batch_first:bool", "dropout:number", "bidirectional:bool", "proj_size:int",
                 "device", "dtype"}
local RNN_OPTIONS = {"num_layers:int", "nonlinearity:string", "bias:bool", "batch_first:bool", "dropout:number",
                     "bidirectional:bool", "proj_size:int", "device", "dtype"}

-- One step of each cell: xw (B, G*H) the input's projection with b_ih,
-- h (B, H) (and c for LSTM) -> the new h (and c).
local function rnn_cell(self, xw, h, w_hh, b_hh)
  local a = xw + F.linear(h, w_hh, b_hh)
  return self.nonlinearity == "relu" and a:relu() or a:tanh()
end

local function lstm_cell(_, xw, h, w_hh, b_hh, c)
  local g = (xw + F.linear(h, w_hh, b_hh)):chunk(4, 2) -- PyTorch's gate order: input, forget, cell, output
  local c2 = g[2]:sigmoid() * c + g[1]:sigmoid() * g[3]:tanh()
  return g[4]:sigmoid() * c2:tanh(), c2
end

local function gru_cell(_, xw, h, w_hh, b_hh)
  local gx, gh = xw:chunk(3, 2), F.linear(h, w_hh, b_hh):chunk(3, 2) -- reset, update, new
  local r, z = (gx[1] + gh[1]):sigmoid(), (gx[2] + gh[2]):sigmoid()
  local n = (gx[3] + r * gh[3]):tanh()
  return (1 - z) * n + z * h
end

local CELLS = {RNN = rnn_cell, LSTM = lstm_cell, GRU = gru_cell}

-- A state argument as h, c: LSTM's {h, c} list (else the error message
-- refuse), the others' h itself.
local function split_state(kind, hx, refuse)
  if kind ~= "LSTM" or hx == nil then return hx, nil end
  if type(hx) ~= "table" or accel.is_tensor(hx) then raise(refuse) end
  return hx[1], hx[2]
end

local function recurrent_class(kind)
  local cls = export_class(M, kind)

  -- kind(input_size, hidden_size, [num_layers = 1], ..., or {num_layers =, bias = true,
  --   batch_first = false, dropout = 0, bidirectional = false, nonlinearity = "tanh" (RNN), dtype =, device =})
  function cls:init(input_size, hidden_size, ...)
    local a = util.torch_args(kind, kind == "RNN" and RNN_OPTIONS or OPTIONS, ...)
    self.input_size = positive(input_size, kind, "input_size")
    self.hidden_size = positive(hidden_size, kind, "hidden_size")
    self.num_layers = positive(a.num_layers or 1, kind, "num_layers")
    self.bias, self.batch_first = a.bias ~= false, a.batch_first == true
    self.dropout, self.bidirectional = a.dropout or 0, a.bidirectional == true
    if type(self.dropout) ~= "number" or self.dropout < 0 or self.dropout > 1 then
      raise("%s: dropout should be a number in range [0, 1], got %s", kind, util.show(a.dropout))
    end
    if a.proj_size ~= nil and a.proj_size ~= 0 then raise("%s: proj_size is not supported", kind) end
    self.nonlinearity = a.nonlinearity or "tanh"
    if self.nonlinearity ~= "tanh" and self.nonlinearity ~= "relu" then
      raise("RNN: Unknown nonlinearity '%s'. Select from 'tanh' or 'relu'.", tostring(self.nonlinearity))
    end
    local g, hs, opts = GATES[kind], hidden_size, {dtype = a.dtype, device = a.device}
    local dirs = self.bidirectional and 2 or 1
    for layer = 0, self.num_layers - 1 do
      for dir = 1, dirs do
        local sfx = ("_l%d%s"):format(layer, dir == 2 and "_reverse" or "")
        local n_in = layer == 0 and input_size or hs * dirs
        self["weight_ih" .. sfx] = Parameter(accel.empty({g * hs, n_in}, opts))
        self["weight_hh" .. sfx] = Parameter(accel.empty({g * hs, hs}, opts))
        if self.bias then
          self["bias_ih" .. sfx] = Parameter(accel.empty(g * hs, opts))
          self["bias_hh" .. sfx] = Parameter(accel.empty(g * hs, opts))
        end
      end
    end
    self:reset_parameters()
  end

  function cls:reset_parameters()
    local b = 1 / math.sqrt(self.hidden_size)
    for _, p in ipairs(self:parameters()) do init.uniform_(p, -b, b) end
  end

  -- the sequence (T, B, n) of one layer and direction from the state h (and c)
  local function run_direction(self, xs, sfx, reverse, h, c)
    local xw = F.linear(xs, self["weight_ih" .. sfx], self["bias_ih" .. sfx]) -- (T, B, G*H) at once
    local w_hh, b_hh = self["weight_hh" .. sfx], self["bias_hh" .. sfx]
    local T, outs = xs:size(1), {}
    for k = 1, T do
      local t = reverse and T - k + 1 or k
      h, c = CELLS[kind](self, xw[t], h, w_hh, b_hh, c)
      outs[t] = h
    end
    return accel.stack(outs, 1), h, c
  end

  -- forward(x, [h0 | {h0, c0}]) -> output, h_n | {h_n, c_n}
  function cls:forward(x, hx)
    if not accel.is_tensor(x) or (x:dim() ~= 2 and x:dim() ~= 3) then
      raise("%s: input must be 2-D (unbatched) or 3-D, got %s", kind, accel.is_tensor(x) and (x:dim() .. "-D") or type(x))
    end
    local unbatched = x:dim() == 2
    if unbatched then x = x:unsqueeze(2) elseif self.batch_first then x = x:transpose(1, 2) end
    if x:size(3) ~= self.input_size then
      raise("%s: input.size(-1) must be equal to input_size. Expected %d, got %d", kind, self.input_size, x:size(3))
    end
    local dirs, B, hs = self.bidirectional and 2 or 1, x:size(2), self.hidden_size
    local h0, c0 = split_state(kind, hx, "LSTM: the initial state must be a list {h0, c0}")
    local function initial(t)
      if t == nil then return accel.zeros(self.num_layers * dirs, B, hs, {dtype = x.dtype, device = x.device}) end
      return unbatched and t:unsqueeze(2) or t
    end
    h0, c0 = initial(h0), kind == "LSTM" and initial(c0) or nil
    local hn, cn, layer_in = {}, {}, x
    for layer = 0, self.num_layers - 1 do
      local outs = {}
      for dir = 1, dirs do
        local i = layer * dirs + dir
        local sfx = ("_l%d%s"):format(layer, dir == 2 and "_reverse" or "")
        outs[dir], hn[i], cn[i] = run_direction(self, layer_in, sfx, dir == 2, h0[i], c0 and c0[i] or nil)
      end
      layer_in = dirs == 2 and accel.cat(outs, 3) or outs[1]
      if layer < self.num_layers - 1 and self.dropout > 0 then
        layer_in = F.dropout(layer_in, self.dropout, self.training)
      end
    end
    local output, h_n = layer_in, accel.stack(hn, 1)
    local c_n = kind == "LSTM" and accel.stack(cn, 1) or nil
    if unbatched then
      output, h_n = output:squeeze(2), h_n:squeeze(2)
      if c_n then c_n = c_n:squeeze(2) end
    elseif self.batch_first then
      output = output:transpose(1, 2)
    end
    if kind == "LSTM" then return output, {h_n, c_n} end
    return output, h_n
  end

  function cls:extra_repr()
    local s = ("%d, %d"):format(self.input_size, self.hidden_size)
    if self.num_layers ~= 1 then s = s .. ", num_layers=" .. self.num_layers end
    if not self.bias then s = s .. ", bias=False" end
    if self.batch_first then s = s .. ", batch_first=True" end
    if self.dropout ~= 0 then s = s .. ", dropout=" .. py(self.dropout) end
    if self.bidirectional then s = s .. ", bidirectional=True" end
    return s
  end
  return cls
end

recurrent_class("RNN")
recurrent_class("LSTM")
recurrent_class("GRU")

-- ---- RNNCell / LSTMCell / GRUCell: one step ----

local function cell_class(kind)
  local cls = export_class(M, kind .. "Cell")
  local name = kind .. "Cell"
  local specs = {"bias:bool", "nonlinearity:string", "device", "dtype"}
  if kind ~= "RNN" then specs = {"bias:bool", "device", "dtype"} end

  -- kind .. "Cell"(input_size, hidden_size, [bias = true], [{bias =, nonlinearity = "tanh" (RNNCell), dtype =, device =}])
  function cls:init(input_size, hidden_size, ...)
    local a = util.torch_args(name, specs, ...)
    self.input_size = positive(input_size, name, "input_size")
    self.hidden_size = positive(hidden_size, name, "hidden_size")
    self.bias = a.bias ~= false
    self.nonlinearity = a.nonlinearity or "tanh"
    if self.nonlinearity ~= "tanh" and self.nonlinearity ~= "relu" then
      raise("RNNCell: Unknown nonlinearity: %s", tostring(self.nonlinearity))
    end
    local gh, opts = GATES[kind] * hidden_size, {dtype = a.dtype, device = a.device}
    self.weight_ih = Parameter(accel.empty({gh, input_size}, opts))
    self.weight_hh = Parameter(accel.empty({gh, hidden_size}, opts))
    if self.bias then
      self.bias_ih = Parameter(accel.empty(gh, opts))
      self.bias_hh = Parameter(accel.empty(gh, opts))
    else
      self:register_parameter("bias_ih", nil)
      self:register_parameter("bias_hh", nil)
    end
    self:reset_parameters()
  end

  cls.reset_parameters = M[kind].reset_parameters

  -- forward(x, [h | {h, c}]) -> h' (LSTMCell: h', c'); x (B, input_size) or (input_size)
  function cls:forward(x, hx)
    if not accel.is_tensor(x) or (x:dim() ~= 1 and x:dim() ~= 2) then
      raise("%s: Expected input to be 1D or 2D, got %s", name, accel.is_tensor(x) and (x:dim() .. "D") or type(x))
    end
    if x:size(-1) ~= self.input_size then
      raise("%s: input has inconsistent input_size: got %d expected %d", name, x:size(-1), self.input_size)
    end
    local unbatched = x:dim() == 1
    if unbatched then x = x:unsqueeze(1) end
    local h, c = split_state(kind, hx, "LSTMCell: the state must be a list {h, c}")
    local function state(t)
      if t == nil then return accel.zeros(x:size(1), self.hidden_size, {dtype = x.dtype, device = x.device}) end
      return unbatched and t:unsqueeze(1) or t
    end
    h, c = state(h), kind == "LSTM" and state(c) or nil
    h, c = CELLS[kind](self, F.linear(x, self.weight_ih, self.bias_ih), h, self.weight_hh, self.bias_hh, c)
    if unbatched then
      h = h:squeeze(1)
      if c then c = c:squeeze(1) end
    end
    if kind == "LSTM" then return h, c end
    return h
  end

  function cls:extra_repr()
    local s = ("%d, %d"):format(self.input_size, self.hidden_size)
    if not self.bias then s = s .. ", bias=False" end
    if self.nonlinearity ~= "tanh" then s = s .. ", nonlinearity=" .. self.nonlinearity end
    return s
  end
end

cell_class("RNN")
cell_class("LSTM")
cell_class("GRU")

return M
