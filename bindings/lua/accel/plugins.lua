-- accel.plugins: the Accelerator's configuration objects, as Accelerate
-- names them: ProjectConfiguration, DeepSpeedPlugin and
-- FullyShardedDataParallelPlugin. Each is a constructor over one options
-- table that checks keys, types and values (an unknown key is an error
-- naming it) and fills in Accelerate's defaults; each also accepts an
-- object it made itself. Both sharding plugins resolve to a ZeRO stage
-- (0: none, 1: optimizer state, 2: + gradients, 3: + parameters), the one
-- native sharding engine of DESIGN §4.
local json = require("accel.json")
local raise = require("accel.nn.module").raise
local read_file = require("accel.util").read_file

local M = {}

-- Checks o's keys against spec {key = "type" | {"type", allowed values...}}.
local function check_options(what, o, spec)
  if o == nil then return {} end
  if type(o) ~= "table" then raise("%s: expected an options table, got %s", what, type(o)) end
  for k, v in pairs(o) do
    local rule = spec[k]
    if rule == nil then
      local keys = {}
      for name in pairs(spec) do keys[#keys + 1] = name end
      table.sort(keys)
      raise("%s: unknown option %s (known: %s)", what, tostring(k), table.concat(keys, ", "))
    end
    local want = type(rule) == "table" and rule[1] or rule
    if want ~= "any" and type(v) ~= want then
      raise("%s: option %s must be a %s, got %s", what, k, want, type(v))
    end
    if type(rule) == "table" and #rule > 1 then
      local ok = false
      for i = 2, #rule do ok = ok or rule[i] == v end
      if not ok then
        local allowed = {}
        for i = 2, #rule do allowed[#allowed + 1] = tostring(rule[i]) end
        raise("%s: option %s must be one of %s, got %s", what, k, table.concat(allowed, ", "), tostring(v))
      end
    end
  end
  return o
end
M.check_options = check_options

-- ---------------------------------------------------------------- ProjectConfiguration

local ProjectConfiguration = {__name = "ProjectConfiguration"}
ProjectConfiguration.__index = ProjectConfiguration
M.ProjectConfiguration_class = ProjectConfiguration

-- accel.ProjectConfiguration{project_dir=, logging_dir=, automatic_checkpoint_naming=false,
--                            total_limit=nil, iteration=0, save_on_each_node=false}
function M.ProjectConfiguration(o)
  if getmetatable(o) == ProjectConfiguration then return o end
  check_options("ProjectConfiguration", o, {project_dir = "string", logging_dir = "string",
    automatic_checkpoint_naming = "boolean", total_limit = "number", iteration = "number",
    save_on_each_node = "boolean"})
  o = o or {}
  if o.total_limit and (o.total_limit < 1 or o.total_limit ~= math.floor(o.total_limit)) then
    raise("ProjectConfiguration: total_limit must be a positive integer, got %s", tostring(o.total_limit))
  end
  return setmetatable({project_dir = o.project_dir, logging_dir = o.logging_dir or o.project_dir,
    automatic_checkpoint_naming = o.automatic_checkpoint_naming == true, total_limit = o.total_limit,
    iteration = o.iteration or 0, save_on_each_node = o.save_on_each_node == true}, ProjectConfiguration)
end

function ProjectConfiguration:set_directories(project_dir)
  self.project_dir = project_dir
  if self.logging_dir == nil then self.logging_dir = project_dir end
end

-- ---------------------------------------------------------------- DeepSpeedPlugin

local DeepSpeedPlugin = {__name = "DeepSpeedPlugin"}
DeepSpeedPlugin.__index = DeepSpeedPlugin
M.DeepSpeedPlugin_class = DeepSpeedPlugin

-- ds_config keys that mean something here, by dotted path.
local DS_KEYS = {
  ["zero_optimization.stage"] = "zero_stage",
  ["zero_optimization.offload_optimizer.device"] = "offload_optimizer_device",
  ["zero_optimization.offload_param.device"] = "offload_param_device",
  ["gradient_accumulation_steps"] = "gradient_accumulation_steps",
  ["gradient_clipping"] = "gradient_clipping",
  ["bf16.enabled"] = "bf16",
  ["fp16.enabled"] = "fp16",
}

-- Dotted paths of every leaf of a ds_config table.
local function leaves(t, prefix, out)
  for k, v in pairs(t) do
    local path = prefix == "" and tostring(k) or prefix .. "." .. tostring(k)
    if type(v) == "table" and next(v) ~= nil and #v == 0 then leaves(v, path, out) else out[path] = v end
  end
  return out
end

local function read_ds_config(cfg)
  if type(cfg) == "table" then return cfg end
  local text, err = read_file(cfg)
  if not text then raise("DeepSpeedPlugin: cannot read hf_ds_config: %s", err) end
  local ok, v = pcall(json.decode, text)
  if not ok or type(v) ~= "table" then raise("DeepSpeedPlugin: hf_ds_config %s is not a JSON object (%s)", cfg, tostring(v)) end
  return v
end

local function check_stage(what, s)
  if s ~= 0 and s ~= 1 and s ~= 2 and s ~= 3 then raise("%s: zero_stage must be 0, 1, 2 or 3, got %s", what, tostring(s)) end
  return s
end

-- accel.DeepSpeedPlugin{zero_stage=2, offload_optimizer_device="none"|"cpu",
--   offload_param_device=, gradient_accumulation_steps=, gradient_clipping=,
--   hf_ds_config="ds_config.json" | table}. Options given explicitly win
-- over ds_config; ds_config keys without a meaning here are listed in
-- plugin.ignored_keys (the Accelerator reports them once).
function M.DeepSpeedPlugin(o)
  if getmetatable(o) == DeepSpeedPlugin then return o end
  check_options("DeepSpeedPlugin", o, {zero_stage = "number", offload_optimizer_device = {"string", "none", "cpu"},
    offload_param_device = {"string", "none", "cpu"}, gradient_accumulation_steps = "number",
    gradient_clipping = "number", hf_ds_config = "any", zero3_init_flag = "boolean"})
  o = o or {}
  local self = setmetatable({ignored_keys = {}, ds_config = nil}, DeepSpeedPlugin)
  if o.hf_ds_config ~= nil then
    if type(o.hf_ds_config) ~= "string" and type(o.hf_ds_config) ~= "table" then
      raise("DeepSpeedPlugin: hf_ds_config must be a file path or a table, got %s", type(o.hf_ds_config))
    end
    self.ds_config = read_ds_config(o.hf_ds_config)
    for path, v in pairs(leaves(self.ds_config, "", {})) do
      local field = DS_KEYS[path]
      if field == nil then
        self.ignored_keys[#self.ignored_keys + 1] = path
      elseif v ~= "auto" then
        self[field] = v
      end
    end
    table.sort(self.ignored_keys)
  end
  for _, k in ipairs({"zero_stage", "offload_optimizer_device", "offload_param_device", "gradient_accumulation_steps",
    "gradient_clipping", "zero3_init_flag"}) do
    if o[k] ~= nil then self[k] = o[k] end
  end
  self.zero_stage = check_stage("DeepSpeedPlugin", self.zero_stage or 2)
  self.offload_optimizer_device = self.offload_optimizer_device or "none"
  self.offload_param_device = self.offload_param_device or "none"
  for _, k in ipairs({"offload_optimizer_device", "offload_param_device"}) do
    if self[k] ~= "none" and self[k] ~= "cpu" then
      raise('DeepSpeedPlugin: %s must be "none" or "cpu", got %s', k, tostring(self[k]))
    end
  end
  return self
end

-- ---------------------------------------------------------------- FSDP plugin

local FSDPPlugin = {__name = "FullyShardedDataParallelPlugin"}
FSDPPlugin.__index = FSDPPlugin
M.FullyShardedDataParallelPlugin_class = FSDPPlugin

local STRATEGY_STAGE = {FULL_SHARD = 3, SHARD_GRAD_OP = 2, NO_SHARD = 0}
local STRATEGY_BY_NUMBER = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"} -- PyTorch's ShardingStrategy numbering

-- accel.FullyShardedDataParallelPlugin{sharding_strategy="FULL_SHARD"|"SHARD_GRAD_OP"|"NO_SHARD" (or 1|2|3),
--   auto_wrap_policy=, cpu_offload=false, ...}: FULL_SHARD is ZeRO-3,
-- SHARD_GRAD_OP ZeRO-2, NO_SHARD plain data parallel.
function M.FullyShardedDataParallelPlugin(o)
  if getmetatable(o) == FSDPPlugin then return o end
  check_options("FullyShardedDataParallelPlugin", o, {sharding_strategy = "any", auto_wrap_policy = "any",
    cpu_offload = "boolean", min_num_params = "number", transformer_cls_names_to_wrap = "any",
    state_dict_type = "string", use_orig_params = "boolean", sync_module_states = "boolean",
    backward_prefetch = "any", forward_prefetch = "boolean", limit_all_gathers = "boolean",
    activation_checkpointing = "boolean"})
  o = o or {}
  local self = setmetatable({}, FSDPPlugin)
  for k, v in pairs(o) do self[k] = v end
  local s = o.sharding_strategy or "FULL_SHARD"
  if type(s) == "number" then s = STRATEGY_BY_NUMBER[s] or tostring(s) end
  if type(s) ~= "string" or STRATEGY_STAGE[s:upper()] == nil then
    raise('FullyShardedDataParallelPlugin: sharding_strategy must be "FULL_SHARD", "SHARD_GRAD_OP" or "NO_SHARD" '
      .. "(or 1, 2, 3), got %s", tostring(o.sharding_strategy))
  end
  self.sharding_strategy = s:upper()
  self.zero_stage = STRATEGY_STAGE[self.sharding_strategy]
  self.cpu_offload = o.cpu_offload == true
  return self
end

M.check_stage = check_stage

return M
