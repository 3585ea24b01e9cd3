-- accel.plugins: the Accelerator's configuration objects, as Accelerate
-- names them: ProjectConfiguration, DeepSpeedPlugin,
-- FullyShardedDataParallelPlugin, GradientAccumulationPlugin,
-- DataLoaderConfiguration and the kwargs handlers InitProcessGroupKwargs,
-- GradScalerKwargs, AutocastKwargs and FP8RecipeKwargs
-- (DistributedDataParallelKwargs lives in accel.ddp). Each is a
-- constructor over one options table that checks keys, types and values
-- (an unknown key is an error naming it and listing the known ones) and
-- fills in Accelerate's defaults; each also accepts an object it made
-- itself. Every option table is registered in M.OPTION_SPECS (read-only),
-- so tests can check that each key has an effect.
--
-- Both sharding plugins resolve to a ZeRO stage (0: none, 1: optimizer
-- state, 2: + gradients, 3: + parameters); the Accelerator maps the
-- plugin onto accel.shard.Engine's options (accel.shard_plan) and builds
-- the engine in prepare. A value this build cannot honour (NVMe offload,
-- offloading with a stage that shards nothing, LOCAL_STATE_DICT, ...)
-- raises one error naming the option and the reason; the mapping of every
-- option is in docs/sharding-accelerator.md.
local json = require("accel.json")
local raise = require("accel.nn.module").raise
local util = require("accel.util")
local read_file = util.read_file

local M = {}

-- Accelerate's options that a constructor refuses, with the reason:
-- refused[constructor][option] = why (see M.refuse).
local refused = {}

-- Checks o's keys against spec {key = "type" | {"type", allowed values...}}.
local function check_options(what, o, spec)
  if o == nil then return {} end
  if type(o) ~= "table" then raise("%s: expected an options table, got %s", what, type(o)) end
  for k, v in pairs(o) do
    local rule = spec[k]
    local why = rule == nil and refused[what] and refused[what][k]
    if type(why) == "table" and why.neutral(v) then
      rule = "any" -- a value that asks for nothing: accepted, as Accelerate's default
    elseif why then
      raise("%s: option %s is Accelerate's but not supported here: %s", what, tostring(k),
        type(why) == "table" and why[1] or why)
    end
    if rule == nil then
      local keys = {}
      for name in pairs(spec) do keys[#keys + 1] = name end
      table.sort(keys)
      raise("%s: unknown option %s (%s)", what, tostring(k),
        #keys > 0 and "known: " .. table.concat(keys, ", ") or "it takes no options")
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

-- refuse(name, {option = why}): options of Accelerate's constructor `name`
-- that this build does not offer; giving one raises with the reason. `why`
-- may be {reason, neutral = function(value)}: values neutral() accepts ask
-- for nothing (Accelerate's default) and pass.
function M.refuse(name, reasons)
  refused[name] = reasons
  return reasons
end

-- Every constructor's option table, by constructor name: register(name,
-- spec) records it; M.OPTION_SPECS[name] is a read-only view of it.
local specs = {}
local function read_only(t, name)
  return setmetatable({}, {__index = t, __pairs = function() return next, t, nil end,
    __newindex = function() raise("OPTION_SPECS.%s is read-only", name) end})
end
M.OPTION_SPECS = setmetatable({}, {
  __index = function(_, k) return specs[k] and read_only(specs[k], k) end,
  __pairs = function()
    local views = {}
    for k, v in pairs(specs) do views[k] = read_only(v, k) end
    return next, views, nil
  end,
  __newindex = function() raise("OPTION_SPECS is read-only") end})
function M.register(name, spec)
  specs[name] = spec
  return spec
end

local show = require("accel.util").show
M.show = show

-- Values this build can honour: limits[key] = {ok = function(v, o) -> bool,
-- why = text | function(v, o) -> text}. A given value outside them raises, naming the option.
local function check_limits(what, o, limits)
  local keys = {}
  for k in pairs(limits) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local v, lim = o[k], limits[k]
    if v ~= nil and not lim.ok(v, o) then
      local why = type(lim.why) == "function" and lim.why(v, o) or lim.why
      raise("%s: %s = %s is not supported: %s", what, k, show(v), why)
    end
  end
end
M.check_limits = check_limits

-- A limit that accepts only the listed values.
local function only(why, ...)
  local allowed = {...}
  return {why = why, ok = function(v)
    for _, a in ipairs(allowed) do
      if v == a then return true end
    end
    return false
  end}
end

-- A class whose objects are made by its constructor only.
local function class(name)
  local c = {__name = name}
  c.__index = c
  c.__tostring = function() return "accel." .. name end
  return c
end

-- ---------------------------------------------------------------- ProjectConfiguration

local ProjectConfiguration = {__name = "ProjectConfiguration"}
ProjectConfiguration.__index = ProjectConfiguration
M.ProjectConfiguration_class = ProjectConfiguration

local PROJECT_OPTIONS = M.register("ProjectConfiguration", {project_dir = "string", logging_dir = "string",
  automatic_checkpoint_naming = "boolean", total_limit = "number", iteration = "number",
  save_on_each_node = "boolean"})

-- accel.ProjectConfiguration{project_dir=, logging_dir=, automatic_checkpoint_naming=false,
--                            total_limit=nil, iteration=0, save_on_each_node=false}
function M.ProjectConfiguration(o)
  if getmetatable(o) == ProjectConfiguration then return o end
  check_options("ProjectConfiguration", o, PROJECT_OPTIONS)
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

-- ---------------------------------------------------------------- launch settings

local flag = util.str_to_bool
local function number(v, var)
  local n = tonumber(v)
  if n == nil then raise("%s=%s is not a number", var, v) end
  return n
end
local function reshard(v)
  local b = util.truth(v)
  if b ~= nil then return b end
  return v
end

-- Every DeepSpeed / FSDP launch setting (host/settings.c, docs/launch.md)
-- -> {plugin option, setting name, conversion, launch's default, the
-- variable Accelerate's plugin reads}.
local DS_SETTINGS = {{"zero_stage", "ZERO_STAGE", number, "2", "ACCELERATE_DEEPSPEED_ZERO_STAGE"},
  {"offload_optimizer_device", "OFFLOAD_OPTIMIZER_DEVICE", nil, "none", "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE"},
  {"offload_param_device", "OFFLOAD_PARAM_DEVICE", nil, "none", "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE"},
  {"offload_optimizer_nvme_path", "OFFLOAD_OPTIMIZER_NVME_PATH", nil, nil, "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_NVME_PATH"},
  {"offload_param_nvme_path", "OFFLOAD_PARAM_NVME_PATH", nil, nil, "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_NVME_PATH"},
  {"gradient_clipping", "GRADIENT_CLIPPING", number, nil, "ACCELERATE_GRADIENT_CLIPPING"},
  {"zero3_init_flag", "ZERO3_INIT_FLAG", flag, "false", "ACCELERATE_DEEPSPEED_ZERO3_INIT"},
  {"zero3_save_16bit_model", "ZERO3_SAVE_16BIT_MODEL", flag, "false", "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL"},
  {"transformer_moe_cls_names", "DEEPSPEED_MOE_LAYER_CLS_NAMES", nil, nil, "ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES"},
  {"hf_ds_config", "DEEPSPEED_CONFIG_FILE", nil, nil, "ACCELERATE_DEEPSPEED_CONFIG_FILE"}}
local FSDP_SETTINGS = {{"fsdp_version", "FSDP_VERSION", number, nil, "FSDP_VERSION"},
  {"sharding_strategy", "FSDP_SHARDING_STRATEGY", nil, nil, "FSDP_SHARDING_STRATEGY"},
  {"cpu_offload", "FSDP_OFFLOAD_PARAMS", flag, nil, "FSDP_OFFLOAD_PARAMS"},
  {"auto_wrap_policy", "FSDP_AUTO_WRAP_POLICY", nil, nil, "FSDP_AUTO_WRAP_POLICY"},
  {"min_num_params", "FSDP_MIN_NUM_PARAMS", number, nil, "FSDP_MIN_NUM_PARAMS"},
  {"transformer_cls_names_to_wrap", "FSDP_TRANSFORMER_LAYER_CLS_TO_WRAP", nil, nil, "FSDP_TRANSFORMER_CLS_TO_WRAP"},
  {"backward_prefetch", "FSDP_BACKWARD_PREFETCH", nil, nil, "FSDP_BACKWARD_PREFETCH"},
  {"state_dict_type", "FSDP_STATE_DICT_TYPE", nil, nil, "FSDP_STATE_DICT_TYPE"},
  {"reshard_after_forward", "FSDP_RESHARD_AFTER_FORWARD", reshard, nil, "FSDP_RESHARD_AFTER_FORWARD"},
  {"forward_prefetch", "FSDP_FORWARD_PREFETCH", flag, nil, "FSDP_FORWARD_PREFETCH"},
  {"use_orig_params", "FSDP_USE_ORIG_PARAMS", flag, nil, "FSDP_USE_ORIG_PARAMS"},
  {"cpu_ram_efficient_loading", "FSDP_CPU_RAM_EFFICIENT_LOADING", flag, nil, "FSDP_CPU_RAM_EFFICIENT_LOADING"},
  {"sync_module_states", "FSDP_SYNC_MODULE_STATES", flag, nil, "FSDP_SYNC_MODULE_STATES"},
  {"activation_checkpointing", "FSDP_ACTIVATION_CHECKPOINTING", flag, nil, "FSDP_ACTIVATION_CHECKPOINTING"}}
M.LAUNCH_SETTINGS = {deepspeed = DS_SETTINGS, fsdp = FSDP_SETTINGS}

local plugin_names = setmetatable({}, {__mode = "k"}) -- plugin -> the name its errors use

-- The name a plugin's errors use (it names the launch settings it read).
function M.name_of(plugin) return plugin_names[plugin] end

-- o with the options it leaves out taken from launch's settings (map), as
-- Accelerate's plugins read their environment variables for every field
-- not given; the name errors use (what, and the variables read, after
-- switch: the launch setting that asked for the plugin, if one did); and
-- {option = {value, variable, launch's default}} for those read.
local function launch_options(o, map, what, switch)
  local out, named, read = {}, {switch}, {}
  for k, v in pairs(o) do out[k] = v end
  for _, e in ipairs(map) do
    local raw, var = util.launch_setting(e[2], e[5])
    if out[e[1]] == nil and raw ~= nil then
      if e[3] then out[e[1]] = e[3](raw, var) else out[e[1]] = raw end -- a conversion may give false
      named[#named + 1] = var .. "=" .. raw
      read[e[1]] = {raw, var, e[4]}
    end
  end
  if #named > 0 then
    what = ("%s %s accel-lua launch's settings (%s)"):format(what, switch and "from" or "with", table.concat(named, ", "))
  end
  return out, what, read
end

-- ---------------------------------------------------------------- DeepSpeedPlugin

local DeepSpeedPlugin = {__name = "DeepSpeedPlugin"}
DeepSpeedPlugin.__index = DeepSpeedPlugin
M.DeepSpeedPlugin_class = DeepSpeedPlugin

-- ds_config keys that mean something here, by dotted path -> plugin field
-- (docs/sharding-accelerator.md says what each does).
local DS_KEYS = {
  ["zero_optimization.stage"] = "zero_stage",
  ["zero_optimization.offload_optimizer.device"] = "offload_optimizer_device",
  ["zero_optimization.offload_param.device"] = "offload_param_device",
  ["zero_optimization.reduce_bucket_size"] = "reduce_bucket_size",
  ["zero_optimization.allgather_bucket_size"] = "allgather_bucket_size",
  ["zero_optimization.overlap_comm"] = "overlap_comm",
  ["zero_optimization.stage3_prefetch_bucket_size"] = "stage3_prefetch_bucket_size",
  ["zero_optimization.stage3_gather_16bit_weights_on_model_save"] = "zero3_save_16bit_model",
  ["gradient_accumulation_steps"] = "gradient_accumulation_steps",
  ["gradient_clipping"] = "gradient_clipping",
  ["train_micro_batch_size_per_gpu"] = "train_micro_batch_size_per_gpu",
  ["train_batch_size"] = "train_batch_size",
  ["bf16.enabled"] = "bf16",
  ["fp16.enabled"] = "fp16",
  ["fp16.initial_scale_power"] = "initial_scale_power",
  ["fp16.loss_scale_window"] = "loss_scale_window",
  ["fp16.loss_scale"] = "loss_scale",
}
M.DS_CONFIG_KEYS = DS_KEYS
-- DeepSpeedPlugin field -> its ds_config path.
local DS_PATH_OF = {}
for path, field in pairs(DS_KEYS) do DS_PATH_OF[field] = path end
M.DS_CONFIG_PATHS = DS_PATH_OF

-- Dotted paths of every leaf of a ds_config table.
local function leaves(t, prefix, out)
  for k, v in pairs(t) do
    local path = prefix == "" and tostring(k) or prefix .. "." .. tostring(k)
    if type(v) == "table" and next(v) ~= nil and #v == 0 then leaves(v, path, out) else out[path] = v end
  end
  return out
end

local function read_ds_config(cfg, what)
  if type(cfg) == "table" then return cfg end
  local text, err = read_file(cfg)
  if not text then raise("%s: cannot read hf_ds_config: %s", what, err) end
  local ok, v = pcall(json.decode, text)
  if not ok or type(v) ~= "table" then raise("%s: hf_ds_config %s is not a JSON object (%s)", what, cfg, tostring(v)) end
  return v
end

local function check_stage(what, s)
  if s ~= 0 and s ~= 1 and s ~= 2 and s ~= 3 then raise("%s: zero_stage must be 0, 1, 2 or 3, got %s", what, show(s)) end
  return s
end

local DS_OPTIONS = M.register("DeepSpeedPlugin", {zero_stage = "number",
  offload_optimizer_device = {"string", "none", "cpu", "nvme"}, offload_param_device = {"string", "none", "cpu", "nvme"},
  offload_optimizer_nvme_path = "string", offload_param_nvme_path = "string",
  gradient_accumulation_steps = "number", gradient_clipping = "number", hf_ds_config = "any",
  zero3_init_flag = "boolean", zero3_save_16bit_model = "boolean", transformer_moe_cls_names = "string",
  is_train_batch_min = "boolean"})
M.refuse("DeepSpeedPlugin", {
  enable_msamp = "MS-AMP is not available; FP8 training is mixed_precision = \"fp8\" (docs/fp8.md)",
  msamp_opt_level = "MS-AMP is not available; FP8 training is mixed_precision = \"fp8\" (docs/fp8.md)"})

local function positive_number(v) return type(v) == "number" and v > 0 end
local function positive_int(v) return positive_number(v) and v == math.floor(v) end
local function is_auto(v) return v == "auto" end
local function positive_or_auto(v) return is_auto(v) or positive_int(v) end
local NVME = "NVMe offload (DeepSpeed's swap files) is not implemented; use \"cpu\""
local function no_nvme_path(v) return v == "" or v == "none" end

-- What a DeepSpeedPlugin can ask of this build (checked on the resolved
-- values, also those that came from hf_ds_config).
local DS_LIMITS = {
  offload_optimizer_device = {ok = function(v, o) return v == "none" or (v == "cpu" and o.zero_stage >= 1) end,
    why = function(v, o)
      return v == "nvme" and NVME or ("offloading the optimizer needs ZeRO stage 1, 2 or 3 (stage %d shards nothing)")
        :format(o.zero_stage)
    end},
  offload_param_device = {ok = function(v, o) return v == "none" or (v == "cpu" and o.zero_stage == 3) end,
    why = function(v, o)
      return v == "nvme" and NVME or ("offloading parameters is ZeRO stage 3, where parameters are sharded (this is "
        .. "stage %d)"):format(o.zero_stage)
    end},
  offload_optimizer_nvme_path = {why = NVME, ok = no_nvme_path},
  offload_param_nvme_path = {why = NVME, ok = no_nvme_path},
  zero3_init_flag = only("parameters are created in full by the model's constructor, before the Accelerator sees "
    .. "them (prepare then shards them); there is no deepspeed.zero.Init", false),
  transformer_moe_cls_names = {why = "there are no mixture-of-experts layers (DeepSpeed MoE) here",
    ok = function(v) return v == "" end},
  gradient_clipping = {why = "it must be a number >= 0 (0: no clipping, DeepSpeed's default) or \"auto\"",
    ok = function(v) return is_auto(v) or (type(v) == "number" and v >= 0) end},
  gradient_accumulation_steps = {why = "it must be a positive integer (or \"auto\")", ok = positive_or_auto},
  train_micro_batch_size_per_gpu = {why = "it must be a positive integer (or \"auto\")", ok = positive_or_auto},
  train_batch_size = {why = "it must be a positive integer (or \"auto\")", ok = positive_or_auto},
  reduce_bucket_size = {why = "it must be a positive number of elements (or \"auto\")",
    ok = function(v) return is_auto(v) or positive_number(v) end},
  allgather_bucket_size = {why = "it must be a positive number of elements, equal to reduce_bucket_size when both are "
    .. "given: the engine reduces and gathers the same units", ok = function(v, o)
      if is_auto(v) then return true end
      if not positive_number(v) then return false end
      return not positive_number(o.reduce_bucket_size) or o.reduce_bucket_size == v
    end},
  overlap_comm = {why = "the engine always starts the gradient reductions during backward (the results are the "
    .. "same either way); give true or leave the key out", ok = function(v) return v == true or is_auto(v) end},
  stage3_prefetch_bucket_size = {why = "it must be a number of elements >= 0 (0: no prefetch) or \"auto\"",
    ok = function(v) return is_auto(v) or (type(v) == "number" and v >= 0) end},
  initial_scale_power = {why = "it must be an integer >= 0 (the loss scale starts at 2^power)",
    ok = function(v) return type(v) == "number" and v >= 0 and v == math.floor(v) end},
  loss_scale_window = {why = "it must be a positive integer (steps without overflow before the scale grows)",
    ok = positive_int},
  loss_scale = {why = "it must be a number >= 0 (0: dynamic loss scaling; another value: that static scale)",
    ok = function(v) return type(v) == "number" and v >= 0 end},
}

-- The defaults of the settings t (a plugin, or deepspeed_settings' table),
-- then the limits.
local function set_defaults(t, what)
  t.offload_optimizer_device = t.offload_optimizer_device or "none"
  t.offload_param_device = t.offload_param_device or "none"
  t.zero3_save_16bit_model = t.zero3_save_16bit_model == true
  for _, k in ipairs({"offload_optimizer_device", "offload_param_device"}) do
    if t[k] ~= "none" and t[k] ~= "cpu" and t[k] ~= "nvme" then
      raise('%s: %s must be "none", "cpu" or "nvme", got %s', what, k, show(t[k]))
    end
  end
  check_limits(what, t, DS_LIMITS)
end

-- A ds_config's settings: {field = value} (DS_KEYS' fields), the fields
-- it gives as "auto", and the sorted paths with no meaning here.
local function parse_ds_config(cfg, what)
  if type(cfg.zero_optimization) ~= "table" then
    local got = cfg.zero_optimization
    raise("%s: hf_ds_config has no zero_optimization section%s; give the ZeRO optimization config, e.g. "
      .. "\"zero_optimization\": {\"stage\": 2}, as Accelerate requires", what,
      got ~= nil and (" (it is " .. show(got) .. ", not an object)") or "")
  end
  local fields, auto, ignored = {}, {}, {}
  for path, v in pairs(leaves(cfg, "", {})) do
    local field = DS_KEYS[path]
    if field == nil then
      ignored[#ignored + 1] = path
    elseif v == "auto" then
      auto[field] = true
    else
      fields[field] = v
    end
  end
  table.sort(ignored)
  for _, k in ipairs({"bf16", "fp16", "overlap_comm", "zero3_save_16bit_model"}) do
    if fields[k] ~= nil and type(fields[k]) ~= "boolean" then
      raise("%s: ds_config %s must be true, false or \"auto\", got %s", what, DS_PATH_OF[k], show(fields[k]))
    end
  end
  if fields.bf16 == true and fields.fp16 == true then
    raise("%s: ds_config has both bf16.enabled and fp16.enabled true; enable one of them (DeepSpeed refuses both)", what)
  end
  return fields, auto, ignored
end

-- ds_config -> plugin fields; the keys with no meaning here go to
-- self.ignored_keys, "auto" values to self.auto[field] (the Accelerator
-- fills them as Accelerate does).
local function take_ds_config(self, cfg, what)
  self.ds_config = read_ds_config(cfg, what)
  local fields
  fields, self.auto, self.ignored_keys = parse_ds_config(self.ds_config, what)
  for k, v in pairs(fields) do self[k] = v end
end

-- An option given both ways must agree with the config (an "auto" there
-- takes the option).
local function check_agrees(self, what, k, v)
  if self.ds_config == nil or self[k] == nil or self[k] == v then return end
  raise("%s: %s = %s disagrees with hf_ds_config's %s = %s; give it in one place", what, k, show(v),
    DS_PATH_OF[k] or k, show(self[k]))
end

local deep_copy = require("accel.util").copy_plain

-- The value at the dotted path of table t (nil where it breaks off).
function M.get_path(t, path)
  for k in path:gmatch("[^.]+") do t = type(t) == "table" and t[k] or nil end
  return t
end

-- Writes v at the dotted path of table t (making the tables on the way).
local function set_path(t, path, v)
  local keys = {}
  for k in path:gmatch("[^.]+") do keys[#keys + 1] = k end
  for i = 1, #keys - 1 do
    if type(t[keys[i]]) ~= "table" then t[keys[i]] = {} end
    t = t[keys[i]]
  end
  t[keys[#keys]] = v
end
M.set_path = set_path

-- The options Accelerate writes into deepspeed_config.
local CONFIG_OPTIONS = {"zero_stage", "offload_optimizer_device", "offload_param_device", "gradient_accumulation_steps",
  "gradient_clipping", "zero3_save_16bit_model"}

-- plugin.deepspeed_config, as Accelerate's: a copy of hf_ds_config with
-- the options given written in (where it says "auto" or nothing), or
-- without one the config the options make, its batch sizes (and the
-- accumulation when not given) "auto". The Accelerator fills the "auto"
-- values and prepare reads its settings from this table.
local function make_deepspeed_config(self, given)
  local cfg = deep_copy(self.ds_config)
  if cfg == nil then
    cfg = {train_batch_size = "auto", train_micro_batch_size_per_gpu = "auto", gradient_accumulation_steps = "auto"}
    self.auto = {train_batch_size = true, train_micro_batch_size_per_gpu = true,
      gradient_accumulation_steps = is_auto(self.gradient_accumulation_steps) or nil}
  end
  for _, k in ipairs(CONFIG_OPTIONS) do
    if self[k] ~= nil and (given[k] ~= nil or self.ds_config == nil or self.auto[k]) then
      set_path(cfg, DS_PATH_OF[k], self[k])
    end
  end
  self.deepspeed_config = cfg
end

-- With a DeepSpeed config, a launch setting read (read: launch_options')
-- at launch's default value gives way to what the config sets (launch
-- always sends ZERO_STAGE=2, the offload devices "none", ...); another
-- value that disagrees with the config is an error naming both.
local function file_over_launch_defaults(self, o, read, what)
  for k, r in pairs(read) do
    if self[k] ~= nil and self[k] ~= o[k] and not self.auto[k] then
      if r[1] ~= r[3] then
        raise("%s: %s = %s disagrees with %s's %s = %s; give it in one place", what, r[2], r[1],
          type(o.hf_ds_config) == "string" and o.hf_ds_config or "hf_ds_config", DS_PATH_OF[k], show(self[k]))
      end
      o[k] = nil
    end
  end
end

-- accel.DeepSpeedPlugin{zero_stage=2, offload_optimizer_device="none"|"cpu",
--   offload_param_device=, gradient_accumulation_steps=, gradient_clipping=,
--   zero3_init_flag=false, zero3_save_16bit_model=false, hf_ds_config="ds_config.json" | table}.
-- zero3_init_flag = true is refused at stage 3; below it Accelerate warns
-- and sets it to false, and so does this constructor.
-- An option given both explicitly and in ds_config must agree (or the
-- config says "auto"); ds_config keys without a
-- meaning here are listed in plugin.ignored_keys (the Accelerator reports
-- them once), "auto" values in plugin.auto. Stages 1-3 run on the sharding
-- engine (accel.shard; the Accelerator builds it in prepare), stage 0 is
-- plain data parallel. gradient_clipping clips the gradients' total norm
-- before every optimizer step, as DeepSpeed's engine does.
-- plugin.deepspeed_config is Accelerate's config table (make_deepspeed_config);
-- prepare reads its settings from it (M.deepspeed_settings). An option not
-- given comes from launch's settings (launch_options); what: the name
-- errors use; switch: the launch setting that asked for the plugin, if one did.
function M.DeepSpeedPlugin(o, what, switch)
  if getmetatable(o) == DeepSpeedPlugin then return o end
  what = what or "DeepSpeedPlugin"
  check_options(what, o, DS_OPTIONS)
  local read
  o, what, read = launch_options(o or {}, DS_SETTINGS, what, switch)
  local self = setmetatable({ignored_keys = {}, auto = {}, ds_config = nil}, DeepSpeedPlugin)
  if o.hf_ds_config ~= nil then
    if type(o.hf_ds_config) ~= "string" and type(o.hf_ds_config) ~= "table" then
      raise("%s: hf_ds_config must be a file path or a table, got %s", what, type(o.hf_ds_config))
    end
    take_ds_config(self, o.hf_ds_config, what)
    file_over_launch_defaults(self, o, read, what)
  end
  for _, k in ipairs({"zero_stage", "offload_optimizer_device", "offload_param_device", "gradient_accumulation_steps",
    "gradient_clipping", "zero3_init_flag", "zero3_save_16bit_model", "offload_optimizer_nvme_path",
    "offload_param_nvme_path", "transformer_moe_cls_names"}) do
    if o[k] ~= nil then
      check_agrees(self, what, k, o[k])
      self[k], self.auto[k] = o[k], nil
    end
  end
  if self.gradient_accumulation_steps == nil then
    -- Accelerate's field: launch's --gradient_accumulation_steps, else "auto"
    -- (launch exports its default 1 always: that one counts as not given,
    -- and a config's "auto" stays for the Accelerator to fill)
    local raw = require("accel.util").launch_setting("GRADIENT_ACCUMULATION_STEPS")
    local launch = raw ~= "1" and not self.auto.gradient_accumulation_steps and tonumber(raw)
    self.gradient_accumulation_steps = positive_int(launch) and launch or "auto"
  end
  self.is_train_batch_min = o.is_train_batch_min ~= false
  if self.auto.zero_stage then self.zero_stage = nil end
  self.zero_stage = check_stage(what, self.zero_stage or 2)
  self.zero3_init_flag = self.zero3_init_flag == true
  if self.zero3_init_flag and self.zero_stage < 3 then -- Accelerate's warning, then false
    io.stderr:write(what .. ": DeepSpeed Zero3 Init flag is only applicable for ZeRO Stage 3. Setting it to False.\n")
    self.zero3_init_flag = false
  end
  set_defaults(self, what)
  make_deepspeed_config(self, o)
  plugin_names[self] = what
  return self
end

-- The settings of plugin.deepspeed_config, as the constructor reads them
-- (checked against the same limits): {field = value}, the "auto" fields
-- and the paths with no meaning here. Accelerate hands that table to
-- deepspeed.initialize in prepare, so edits made to it before prepare count.
function M.deepspeed_settings(ds, what)
  if type(ds.deepspeed_config) ~= "table" then
    raise("%s: deepspeed_config must be a table, got %s", what, type(ds.deepspeed_config))
  end
  local t, auto, ignored = parse_ds_config(ds.deepspeed_config, what)
  t.zero_stage = check_stage(what, t.zero_stage == nil and ds.zero_stage or t.zero_stage)
  for _, k in ipairs({"zero3_init_flag", "offload_optimizer_nvme_path", "offload_param_nvme_path",
    "transformer_moe_cls_names"}) do t[k] = ds[k] end
  set_defaults(t, what)
  return t, auto, ignored
end

-- ---------------------------------------------------------------- FSDP plugin

local FSDPPlugin = {__name = "FullyShardedDataParallelPlugin"}
FSDPPlugin.__index = FSDPPlugin
M.FullyShardedDataParallelPlugin_class = FSDPPlugin

local STRATEGY_STAGE = {FULL_SHARD = 3, SHARD_GRAD_OP = 2, NO_SHARD = 0, HYBRID_SHARD = 3, HYBRID_SHARD_ZERO2 = 2}
M.FSDP_STRATEGY_STAGE = STRATEGY_STAGE
-- PyTorch's ShardingStrategy numbering
local STRATEGY_BY_NUMBER = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"}

local FSDP_OPTIONS = M.register("FullyShardedDataParallelPlugin", {sharding_strategy = "any",
  auto_wrap_policy = "any", cpu_offload = "boolean", min_num_params = "number", transformer_cls_names_to_wrap = "any",
  state_dict_type = "string", use_orig_params = "boolean", sync_module_states = "boolean",
  backward_prefetch = "string", forward_prefetch = "boolean", limit_all_gathers = "boolean",
  activation_checkpointing = "boolean", fsdp_version = "number", reshard_after_forward = "any",
  cpu_ram_efficient_loading = "boolean", activation_checkpointing_offload = "boolean"})
local SHARDS_WRITTEN = "save_state writes reshardable shards and get_state_dict / save_model gather full weights "
  .. "(docs/sharding-accelerator.md)"
M.refuse("FullyShardedDataParallelPlugin", {
  mixed_precision_policy = "the precision is the Accelerator's mixed_precision (bf16 / fp16 compute, float32 master "
    .. "shards)",
  ignored_modules = "every parameter of the model is sharded",
  state_dict_config = SHARDS_WRITTEN, optim_state_dict_config = SHARDS_WRITTEN,
  param_init_fn = "models are built on the host before prepare (no meta-device initialisation)"})

-- Accelerate's spellings of the string options (either case).
local FSDP_CHOICES = {auto_wrap_policy = {"transformer_based_wrap", "size_based_wrap", "no_wrap"},
  state_dict_type = {"FULL_STATE_DICT", "SHARDED_STATE_DICT", "LOCAL_STATE_DICT"},
  backward_prefetch = {"BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"}}

-- PyTorch's StateDictType numbering (Accelerate reads digit strings so)
local STATE_DICT_TYPE_BY_NUMBER = {["1"] = "FULL_STATE_DICT", ["2"] = "LOCAL_STATE_DICT", ["3"] = "SHARDED_STATE_DICT"}

local function fsdp_choice(what, k, v)
  if k == "auto_wrap_policy" and type(v) == "function" then return v end -- policy(module, recurse, nonwrapped_numel)
  if k == "state_dict_type" and STATE_DICT_TYPE_BY_NUMBER[v] then return STATE_DICT_TYPE_BY_NUMBER[v] end
  if type(v) ~= "string" then
    raise("%s: %s must be one of %s%s, got %s", what, k, table.concat(FSDP_CHOICES[k], ", "),
      k == "auto_wrap_policy" and " or a function (module, recurse, nonwrapped_numel) -> boolean"
      or k == "state_dict_type" and " (or \"1\" to \"3\")" or "", type(v))
  end
  for _, c in ipairs(FSDP_CHOICES[k]) do
    if c:lower() == v:lower() then return c end
  end
  raise("%s: %s must be one of %s%s, got %s", what, k, table.concat(FSDP_CHOICES[k], ", "),
    k == "state_dict_type" and ' (or "1" to "3")' or "", show(v))
end

-- The values this build cannot honour (the rest: docs/sharding-accelerator.md).
local FSDP_LIMITS = {
  cpu_offload = {why = "offloading needs a sharded strategy (NO_SHARD shards nothing)",
    ok = function(v, o) return v == false or o.zero_stage >= 1 end},
  state_dict_type = only("LOCAL_STATE_DICT is each rank's flat buffer, which cannot be loaded on another number of "
    .. "processes; use SHARDED_STATE_DICT or FULL_STATE_DICT", "FULL_STATE_DICT", "SHARDED_STATE_DICT"),
  sync_module_states = {why = "with NO_SHARD prepare always broadcasts rank 0's parameters and buffers (DDP)",
    ok = function(v, o) return v == true or o.zero_stage >= 1 end},
  fsdp_version = only("FSDP versions are 1 and 2 (both run on the same engine)", 1, 2),
  min_num_params = {why = "it must be a positive integer", ok = function(v) return positive_int(v) end},
}

local function strategy_name(what, s, given)
  if type(s) == "string" and s:match("^%d+$") then s = tonumber(s) end -- Accelerate's digit strings
  if type(s) == "number" then s = STRATEGY_BY_NUMBER[s] or tostring(s) end
  if type(s) ~= "string" or STRATEGY_STAGE[s:upper()] == nil then
    raise('%s: sharding_strategy must be "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD" or '
      .. '"HYBRID_SHARD_ZERO2" (or 1 to 5), got %s', what, tostring(given))
  end
  return s:upper()
end

-- The strategies that keep the parameters gathered from forward to
-- backward (reshard_after_forward = false) and their resharding twins.
local KEEPS_GATHERED = {SHARD_GRAD_OP = "FULL_SHARD", HYBRID_SHARD_ZERO2 = "HYBRID_SHARD"}
local RESHARDS = {FULL_SHARD = "SHARD_GRAD_OP", HYBRID_SHARD = "HYBRID_SHARD_ZERO2"}

-- reshard_after_forward: FSDP2's boolean (false keeps the parameters
-- gathered from forward to backward: SHARD_GRAD_OP) or, as Accelerate's
-- FSDP1 spelling, a strategy name; it must agree with sharding_strategy
-- (a boolean that contradicts a given one is Accelerate's FSDP1 error).
local function apply_reshard(self, what, r, strategy_given)
  if r == "true" then r = true elseif r == "false" then r = false end
  if r == nil then return end
  if type(r) == "boolean" then
    local s = self.sharding_strategy
    local twin = (r and KEEPS_GATHERED or RESHARDS)[s]
    if twin and strategy_given then
      raise('%s: reshard_after_forward set to %s. This is not supported with FSDP1 together with sharding_strategy '
        .. '= "%s" (reshard_after_forward = %s means "%s"); please set it to a strategy name, or leave one of them out',
        what, tostring(r), s, tostring(r), twin)
    end
    self.sharding_strategy = twin or s
    return
  end
  local s = strategy_name(what, r, r)
  if strategy_given and s ~= self.sharding_strategy then
    raise('%s: reshard_after_forward = "%s" disagrees with sharding_strategy = "%s"', what, s, self.sharding_strategy)
  end
  self.sharding_strategy = s
end

-- FSDP2 (fsdp_version = 2), as Accelerate: reshard_after_forward is a
-- boolean (default true: FULL_SHARD; false: SHARD_GRAD_OP) and decides over
-- the deprecated sharding_strategy; forward_prefetch = true is refused. A
-- sharding_strategy given (NO_SHARD aside) must agree with
-- reshard_after_forward, or without it with the default (HYBRID_* choose the
-- machine split then).
local function check_fsdp2(self, what, o)
  local r = o.reshard_after_forward
  if r == "true" then r = true elseif r == "false" then r = false end
  if r ~= nil and type(r) ~= "boolean" then
    raise("%s: reshard_after_forward set to %s. This is not supported with FSDP2, please set to a boolean", what,
      show(r))
  end
  if o.forward_prefetch == true then
    raise("%s: forward_prefetch is not yet implemented in FSDP2, set it to false or use fsdp_version = 1", what)
  end
  local s = self.sharding_strategy
  local hybrid = s == "HYBRID_SHARD" or s == "HYBRID_SHARD_ZERO2"
  if r == nil then
    if o.sharding_strategy ~= nil and not hybrid and s ~= "FULL_SHARD" then
      raise('%s: with fsdp_version = 2 sharding_strategy is deprecated and reshard_after_forward decides (default '
        .. 'true: FULL_SHARD); for sharding_strategy = "%s" set reshard_after_forward = %s', what, s,
        s == "SHARD_GRAD_OP" and "false" or "true")
    end
    return
  end
  if o.sharding_strategy == nil then
    self.sharding_strategy = r and "FULL_SHARD" or "SHARD_GRAD_OP"
  elseif s ~= "NO_SHARD" and STRATEGY_STAGE[s] ~= (r and 3 or 2) then
    raise('%s: with fsdp_version = 2 sharding_strategy is deprecated and reshard_after_forward decides; '
      .. 'sharding_strategy = "%s" contradicts reshard_after_forward = %s (it needs %s): make them agree or leave '
      .. 'sharding_strategy out', what, s, tostring(r), tostring(not r))
  end
end

-- accel.FullyShardedDataParallelPlugin{sharding_strategy="FULL_SHARD"|"SHARD_GRAD_OP"|"NO_SHARD"|
--   "HYBRID_SHARD"|"HYBRID_SHARD_ZERO2" (or PyTorch's numbers 1-5), auto_wrap_policy=, cpu_offload=false, ...}:
-- FULL_SHARD / HYBRID_SHARD are ZeRO-3, SHARD_GRAD_OP / HYBRID_SHARD_ZERO2
-- ZeRO-2 (the sharding engine, built by the Accelerator's prepare; the
-- hybrid ones need several machines), NO_SHARD plain data parallel. An
-- option not given comes from launch's settings (launch_options); what: the
-- name errors use; switch: as DeepSpeedPlugin's.
function M.FullyShardedDataParallelPlugin(o, what, switch)
  if getmetatable(o) == FSDPPlugin then return o end
  what = what or "FullyShardedDataParallelPlugin"
  check_options(what, o, FSDP_OPTIONS)
  o, what = launch_options(o or {}, FSDP_SETTINGS, what, switch)
  check_options(what, o, FSDP_OPTIONS)
  local self = setmetatable({}, FSDPPlugin)
  for k, v in pairs(o) do self[k] = FSDP_CHOICES[k] and fsdp_choice(what, k, v) or v end
  self.fsdp_version = o.fsdp_version or 1
  self.sharding_strategy = strategy_name(what, o.sharding_strategy or "FULL_SHARD", o.sharding_strategy)
  if self.fsdp_version == 2 then
    check_fsdp2(self, what, o)
  else
    apply_reshard(self, what, o.reshard_after_forward, o.sharding_strategy ~= nil)
  end
  self.zero_stage = STRATEGY_STAGE[self.sharding_strategy]
  self.cpu_offload = o.cpu_offload == true
  check_limits(what, self, FSDP_LIMITS)
  -- Accelerate's default: FULL_STATE_DICT with FSDP1, SHARDED_STATE_DICT with FSDP2 (save_state writes the same
  -- shards either way: docs/sharding-accelerator.md)
  self.state_dict_type = self.state_dict_type or (self.fsdp_version == 2 and "SHARDED_STATE_DICT" or "FULL_STATE_DICT")
  self.auto_wrap_policy = self.auto_wrap_policy or "no_wrap"
  -- Accelerate's defaults as attributes (read by nothing here but the user):
  -- limit_all_gathers true; use_orig_params / forward_prefetch false under FSDP1 (FSDP2 has neither)
  if self.limit_all_gathers == nil then self.limit_all_gathers = true end
  if self.fsdp_version == 1 then
    self.use_orig_params = self.use_orig_params == true
    self.forward_prefetch = self.forward_prefetch == true
  end
  self.activation_checkpointing = o.activation_checkpointing == true
  if o.activation_checkpointing_offload then
    raise("%s: activation_checkpointing_offload = true is not supported: checkpointed activations are recomputed "
      .. "in backward, not offloaded to host memory", what)
  end
  self.activation_checkpointing_offload = false
  self.sync_module_states = o.sync_module_states ~= false
  self.cpu_ram_efficient_loading = o.cpu_ram_efficient_loading == true
  if self.cpu_ram_efficient_loading and not self.sync_module_states then
    raise("%s: cpu_ram_efficient_loading = true needs sync_module_states = true (the other ranks get rank 0's "
      .. "weights by broadcast), as in Accelerate", what)
  end
  local names = self.transformer_cls_names_to_wrap
  if type(names) == "string" then
    local list = {}
    for n in names:gmatch("[^,%s]+") do list[#list + 1] = n end
    self.transformer_cls_names_to_wrap = list
  elseif names ~= nil and type(names) ~= "table" then
    raise("%s: transformer_cls_names_to_wrap must be a list of class names or a comma-separated string, got %s",
      what, type(names))
  end
  plugin_names[self] = what
  return self
end

M.check_stage = check_stage

-- ---------------------------------------------------------------- kwargs handlers and small configurations

local made_by = {} -- metatable -> constructor name
local given = setmetatable({}, {__mode = "k"}) -- object -> the options its constructor was given

-- A configuration class `name`: accel.<name>{...} checks the options against
-- spec and limits, fills in defaults, then finish(self) may check more.
local function configuration(name, spec, defaults, limits, finish)
  local c = class(name)
  made_by[c] = name
  M[name .. "_class"] = c
  M.register(name, spec)
  M[name] = function(o)
    if getmetatable(o) == c then return o end
    check_options(name, o, spec)
    o = o or {}
    check_limits(name, o, limits or {})
    local self = setmetatable({}, c)
    for k, v in pairs(defaults) do self[k] = v end
    local keys = {}
    for k, v in pairs(o) do self[k], keys[k] = v, true end
    given[self] = keys
    if finish then finish(self) end
    return self
  end
end

-- true when the configuration object was made with option k given.
function M.was_given(x, k) return given[x] ~= nil and given[x][k] == true end

-- The constructor name of a configuration object made here (nil otherwise).
function M.kind_of(x)
  return type(x) == "table" and made_by[getmetatable(x)] or nil
end

local function positive(why) return {why = why, ok = function(v) return v > 0 end} end
local function positive_integer(why)
  return {why = why, ok = function(v) return v >= 1 and v == math.floor(v) end}
end
local function non_negative_integer(why)
  return {why = why, ok = function(v) return v >= 0 and v < math.huge and v == math.floor(v) end}
end
local FROM_LAUNCHER = "the processes and their communicator (MPI) are set up by accel-lua launch / mpirun, not from the script"

-- accel.InitProcessGroupKwargs{timeout = seconds}: the collective timeout
-- (the watchdog's limit, accel.dist.set_timeout); without it the default
-- (ACCEL_LUA_COLLECTIVE_TIMEOUT or the built-in one) stays.
configuration("InitProcessGroupKwargs", {timeout = "number", backend = "any", init_method = "any"}, {}, {
  timeout = positive("it must be a positive number of seconds"),
  backend = {why = FROM_LAUNCHER, ok = function() return false end},
  init_method = {why = FROM_LAUNCHER, ok = function() return false end}})

-- accel.GradScalerKwargs{init_scale = 65536, growth_factor = 2, backoff_factor = 0.5,
--   growth_interval = 2000, enabled = true}: the fp16 GradScaler (PyTorch's rules).
local SCALER_SPEC = {init_scale = "number", growth_factor = "number", backoff_factor = "number",
  growth_interval = "number", enabled = "boolean"}
local SCALER_LIMITS = {
  init_scale = positive("it must be a positive number"),
  growth_factor = {why = "it must be greater than 1", ok = function(v) return v > 1 end},
  backoff_factor = {why = "it must be between 0 and 1", ok = function(v) return v > 0 and v < 1 end},
  growth_interval = positive_integer("it must be a positive integer")}
configuration("GradScalerKwargs", SCALER_SPEC,
  {init_scale = 65536.0, growth_factor = 2.0, backoff_factor = 0.5, growth_interval = 2000, enabled = true},
  SCALER_LIMITS)

-- o checked as GradScalerKwargs's options, errors named for what (accel.amp.GradScaler)
function M.check_scaler_options(what, o)
  check_options(what, o, SCALER_SPEC)
  check_limits(what, o, SCALER_LIMITS)
end

-- accel.AutocastKwargs{enabled = true, cache_enabled = nil}: enabled = false
-- turns autocast off for the prepared forward and accelerator:autocast.
-- cache_enabled is accepted either way: casts are not cached here, so a
-- weight changed in place inside an autocast region is cast afresh (PyTorch,
-- caching, reuses its stale cast; see docs/accelerator.md).
configuration("AutocastKwargs", {enabled = "boolean", cache_enabled = "boolean"}, {enabled = true})

-- Why Accelerate's fp8 options that this recipe takes only as false (their
-- default) are refused when true (also their ACCELERATE_FP8_* settings).
M.FP8_FALSE_ONLY = {
  use_autocast_during_eval = "in eval mode the fp8 Linear runs in bf16 (Accelerate's default, false)",
  override_linear_precision = "every product of the recipe is fp8 (no per-GEMM override)",
  use_mxfp8_block_scaling = "only per-tensor delayed scaling is provided",
}

-- accel.FP8RecipeKwargs{fp8_format = "HYBRID", amax_history_len = 1024,
--   amax_compute_algo = "most_recent", margin = 0, interval = 1}: checked as
-- Accelerate checks it (margin also at most 64: the scale is divided by
-- 2^margin in float32, so a larger one only makes every scale 0).
configuration("FP8RecipeKwargs", {fp8_format = "string", amax_history_len = "number", amax_compute_algo = "string",
  margin = "number", interval = "number", use_autocast_during_eval = "boolean"},
  {fp8_format = "HYBRID", amax_history_len = 1024, amax_compute_algo = "most_recent", margin = 0, interval = 1,
   use_autocast_during_eval = false}, {
  use_autocast_during_eval = {why = M.FP8_FALSE_ONLY.use_autocast_during_eval, ok = function(v) return v == false end},
  amax_history_len = positive_integer("it must be a positive integer"),
  margin = {why = "it must be an integer from 0 to 64", ok = function(v)
    return non_negative_integer().ok(v) and v <= 64
  end},
  interval = positive_integer("it must be a positive integer")},
  function(self)
    self.fp8_format, self.amax_compute_algo = self.fp8_format:upper(), self.amax_compute_algo:lower()
    if self.fp8_format ~= "HYBRID" and self.fp8_format ~= "E4M3" and self.fp8_format ~= "E5M2" then
      raise('FP8RecipeKwargs: fp8_format must be "HYBRID", "E4M3" or "E5M2", got %s', show(self.fp8_format))
    end
    if self.amax_compute_algo ~= "max" and self.amax_compute_algo ~= "most_recent" then
      raise('FP8RecipeKwargs: amax_compute_algo must be "max" or "most_recent", got %s', show(self.amax_compute_algo))
    end
  end)

M.refuse("FP8RecipeKwargs", {
  override_linear_precision = M.FP8_FALSE_ONLY.override_linear_precision,
  backend = "the recipe is Transformer Engine's delayed scaling (MS-AMP and torchao are not provided)",
  opt_level = "that is MS-AMP's option (MS-AMP is not provided)",
  use_mxfp8_block_scaling = M.FP8_FALSE_ONLY.use_mxfp8_block_scaling,
})

-- accel.GradientAccumulationPlugin{num_steps = 1, adjust_scheduler = true,
--   sync_with_dataloader = true, sync_each_batch = false}
configuration("GradientAccumulationPlugin", {num_steps = "number", adjust_scheduler = "boolean",
  sync_with_dataloader = "boolean", sync_each_batch = "boolean"},
  {num_steps = 1, adjust_scheduler = true, sync_with_dataloader = true, sync_each_batch = false},
  {num_steps = positive_integer("it must be a positive integer")})

-- accel.DataLoaderConfiguration{split_batches = false, even_batches = true,
--   dispatch_batches = false, use_seedable_sampler = false, data_seed = nil,
--   non_blocking = false, use_stateful_dataloader = false}
configuration("DataLoaderConfiguration", {split_batches = "boolean", even_batches = "boolean",
  dispatch_batches = "boolean", use_seedable_sampler = "boolean", data_seed = "number", non_blocking = "boolean",
  use_stateful_dataloader = "boolean"},
  {split_batches = false, even_batches = true, dispatch_batches = false, use_seedable_sampler = false,
   non_blocking = false, use_stateful_dataloader = false},
  {dispatch_batches = only("every process iterates its own shard of the loader; dispatching batches from the main "
    .. "process is not implemented", false),
   data_seed = {why = "it must be an integer (a 64-bit seed)", ok = function(v)
     return v == math.floor(v) and v >= -2 ^ 63 and v < 2 ^ 63
   end}})


-- A method called with "." instead of ":" raises at the caller's line.
require("accel.util").check_methods(ProjectConfiguration, "ProjectConfiguration")
require("accel.util").check_methods(DeepSpeedPlugin, "DeepSpeedPlugin")
require("accel.util").check_methods(FSDPPlugin, "FullyShardedDataParallelPlugin")
return M
