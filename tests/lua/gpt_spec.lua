-- gpt_spec.lua: accel.models.gpt2 (examples/gpt.lua's model).
--  * names and shapes are Hugging Face GPT-2's (the list below is written
--    from transformers' GPT2LMHeadModel layout, not from our code), in
--    model:state_dict() and in the file accelerator:save_model writes;
--    config.json carries HF's keys; from_pretrained reads our files and
--    HF-style variants (old causal-mask buffers, a tied lm_head.weight,
--    GPT2Model names without "transformer.").
--  * numerics (issue 5's guard for the fused kernels): one GPT block's
--    forward and backward, and a tiny GPT's logits, loss and every gradient,
--    match PyTorch float64 references (tests/fixtures/gpt_block.safetensors,
--    scripts/fixtures/make_gpt_fixtures.py) to 1e-4 in float32.
--  * initialisation (also of a GPT2Model alone) against transformers' stds;
--    a checkpoint with another head's weights loads, as in transformers.
--  * causality, sampling (reproducible, greedy = top_k 1, greedy ties as
--    torch.argmax, the law of temperature / top-k sampling against
--    transformers' warpers), errors.
--  * examples/gpt.lua runs end to end on a small text (a tiny config, 40
--    steps): the validation loss falls, a sample is printed, the HF files,
--    checkpoints and logs are written.
local accel = require("accel")
local json = require("accel.json")
local support = dofile("tests/lua/support.lua")
local gpt2 = accel.models.gpt2
local C = accel._C

local FIXTURE = "tests/fixtures/gpt_block.safetensors"
local BIN = support.ACCEL_LUA
local TOL = 1e-4
local tmpdir, read, shape_of = support.tmpdir, support.read_file, support.shape_of

-- entries of f under prefix (prefix removed) whose remaining name holds a dot (weights)
local function weights(f, prefix)
  local out = {}
  for k, v in pairs(f) do
    local name = k:sub(1, #prefix) == prefix and k:sub(#prefix + 1)
    if name and name:find("%.") then out[name] = v end
  end
  return out
end

local function count(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end

-- fn() raises an error that contains `needle` and points at this file
local function fails_with(fn, needle)
  local ok, err = pcall(fn)
  assert(not ok, "expected an error containing: " .. needle)
  err = tostring(err)
  assert(err:find(needle, 1, true), ("error %q does not contain %q"):format(err, needle))
  assert(err:find("gpt_spec.lua:", 1, true), ("error %q does not point at the caller's line"):format(err))
end

local stderr_of = support.stderr_of

-- max |got - want| <= TOL * max(max |want|, 1e-2): relative to the tensor's scale
local function assert_close(got, want, what)
  assert(got ~= nil, what .. ": no value")
  assert.are.same(shape_of(want), shape_of(got))
  local diff = (got:double() - want:double()):abs():max():item()
  local scale = math.max(want:double():abs():max():item(), 1e-2)
  assert(diff <= TOL * scale, ("%s: max difference %.3e, allowed %.3e (scale %.3e)"):format(what, diff, TOL * scale, scale))
end

-- HF GPT2LMHeadModel's parameters for vocab V, n_positions P, n_embd E,
-- n_layer L, n_inner I, in HF's state_dict order (lm_head.weight is tied:
-- HF's files leave it out).
local function hf_layout(V, P, E, L, I)
  local rows = {{"transformer.wte.weight", {V, E}}, {"transformer.wpe.weight", {P, E}}}
  for i = 0, L - 1 do
    local h = "transformer.h." .. i .. "."
    for _, r in ipairs({
      {"ln_1.weight", {E}}, {"ln_1.bias", {E}},
      {"attn.c_attn.weight", {E, 3 * E}}, {"attn.c_attn.bias", {3 * E}},
      {"attn.c_proj.weight", {E, E}}, {"attn.c_proj.bias", {E}},
      {"ln_2.weight", {E}}, {"ln_2.bias", {E}},
      {"mlp.c_fc.weight", {E, I}}, {"mlp.c_fc.bias", {I}},
      {"mlp.c_proj.weight", {I, E}}, {"mlp.c_proj.bias", {E}},
    }) do rows[#rows + 1] = {h .. r[1], r[2]} end
  end
  rows[#rows + 1] = {"transformer.ln_f.weight", {E}}
  rows[#rows + 1] = {"transformer.ln_f.bias", {E}}
  return rows
end

local TINY = {vocab_size = 40, n_positions = 12, n_embd = 16, n_layer = 2, n_head = 2, dropout = 0}

describe("GPT-2 names and layouts (Hugging Face)", function()
  it("state_dict has HF GPT2LMHeadModel's names, shapes and order", function()
    accel.set_seed(1)
    local model = gpt2.GPT2LMHeadModel(gpt2.GPT2Config(TINY))
    local want = hf_layout(40, 12, 16, 2, 64)
    local keys, sd = model:state_dict_keys(), model:state_dict()
    assert.are.equal(#want, #keys)
    for i, r in ipairs(want) do
      assert.are.equal(r[1], keys[i])
      assert.are.same(r[2], shape_of(sd[r[1]]))
    end
    assert.is_nil(sd["lm_head.weight"])
    assert.are.equal(40 * 16 + 12 * 16 + 2 * (4 * 16 + 16 * 48 + 48 + 16 * 16 + 16 + 16 * 64 + 64 + 64 * 16 + 16) + 32,
      model:num_parameters())
  end)

  it("an untied head is lm_head.weight (vocab, n_embd), last, as HF", function()
    local o = {tie_word_embeddings = false}
    for k, v in pairs(TINY) do o[k] = v end
    local model = gpt2.GPT2LMHeadModel(gpt2.GPT2Config(o))
    local keys = model:state_dict_keys()
    assert.are.equal("lm_head.weight", keys[#keys])
    assert.are.same({40, 16}, shape_of(model:state_dict()["lm_head.weight"]))
    assert.is_false(rawequal(model.lm_head.weight, model.transformer.wte.weight))
  end)

  it("initialises as HF: N(0, 0.02), c_proj N(0, 0.02 / sqrt(2 n_layer)), zero biases, LayerNorm 1 / 0", function()
    accel.set_seed(2)
    local model = gpt2.GPT2LMHeadModel(gpt2.GPT2Config{vocab_size = 256, n_positions = 64, n_embd = 64, n_layer = 8, n_head = 4})
    local sd = model:state_dict()
    local function std(t) return t:double():std():item() end
    assert.is_true(math.abs(std(sd["transformer.wte.weight"]) - 0.02) < 0.002)
    assert.is_true(math.abs(std(sd["transformer.h.0.mlp.c_fc.weight"]) - 0.02) < 0.002)
    assert.is_true(math.abs(std(sd["transformer.h.3.mlp.c_proj.weight"]) - 0.005) < 0.0005)
    assert.is_true(math.abs(std(sd["transformer.h.3.attn.c_proj.weight"]) - 0.005) < 0.0005)
    assert.are.equal(0, sd["transformer.h.1.attn.c_attn.bias"]:abs():sum():item())
    assert.are.equal(64, sd["transformer.ln_f.weight"]:sum():item())
  end)

  it("a standalone GPT2Model initialises as transformers' GPT2Model (initializer_range honoured)", function()
    -- transformers 5.24, torch.manual_seed(0), GPT2Model(GPT2Config(vocab_size=1000, n_positions=256,
    -- n_embd=128, n_layer=4, n_head=4, initializer_range=0.05)): the stds of its state_dict
    local hf = {["wte.weight"] = 0.04991, ["wpe.weight"] = 0.04980, ["h.0.attn.c_attn.weight"] = 0.05000,
      ["h.0.attn.c_proj.weight"] = 0.01761, ["h.3.mlp.c_fc.weight"] = 0.05043, ["h.3.mlp.c_proj.weight"] = 0.01777}
    accel.set_seed(9)
    local sd = gpt2.GPT2Model{vocab_size = 1000, n_positions = 256, n_embd = 128, n_layer = 4, n_head = 4,
      initializer_range = 0.05}:state_dict()
    for name, want in pairs(hf) do
      local got = sd[name]:double():std():item()
      assert(math.abs(got - want) <= 0.03 * want, ("%s: std %.5f, transformers %.5f"):format(name, got, want))
    end
    local biases, ln_w, ln_b = 0, 0, 0
    for name, t in pairs(sd) do
      if name:find("%.ln_") or name:find("^ln_f") then
        if name:find("weight$") then ln_w = ln_w + t:sum():item() else ln_b = ln_b + t:abs():sum():item() end
      elseif name:find("bias$") then biases = biases + t:abs():sum():item() end
    end
    assert.are.same({0, 1152, 0}, {biases, ln_w, ln_b}) -- transformers: the same sums
  end)

  it("accelerator:save_model writes HF's file; config.json has HF's keys; from_pretrained reads both back", function()
    accel.set_seed(3)
    local config = gpt2.GPT2Config(TINY)
    local model = gpt2.GPT2LMHeadModel(config)
    local accelerator = accel.Accelerator{}
    model = accelerator:prepare(model)
    local dir = tmpdir()
    accelerator:save_model(model, dir)
    config:save_pretrained(dir)
    local tensors, meta = accel.load(dir .. "/model.safetensors")
    assert.are.equal("pt", meta.format)
    local want = hf_layout(40, 12, 16, 2, 64)
    assert.are.equal(#want, count(tensors))
    for _, r in ipairs(want) do
      assert(tensors[r[1]], "missing " .. r[1])
      assert.are.same(r[2], shape_of(tensors[r[1]]))
      assert.are.equal(accel.float32, tensors[r[1]].dtype)
    end
    local cfg = json.decode(read(dir .. "/config.json"))
    assert.are.equal("gpt2", cfg.model_type)
    assert.are.same({"GPT2LMHeadModel"}, cfg.architectures)
    assert.are.equal(40, cfg.vocab_size)
    assert.are.equal(12, cfg.n_positions)
    assert.are.equal(16, cfg.n_embd)
    assert.are.equal(2, cfg.n_layer)
    assert.are.equal(2, cfg.n_head)
    assert.are.equal("gelu_new", cfg.activation_function)
    assert.are.equal(1e-5, cfg.layer_norm_epsilon)
    assert.are.equal(0, cfg.resid_pdrop)
    assert.is_true(cfg.tie_word_embeddings)

    local again = gpt2.GPT2LMHeadModel.from_pretrained(dir)
    assert.is_false(again.training) -- eval mode, as transformers' from_pretrained
    local ids = accel.randint(0, 40, {2, 12})
    assert.is_true(again(ids):equal(model(ids)))
    C.fs_remove_tree(dir)
  end)

  it("refuses what HF refuses or cannot mean: targets with labels, bad generate values, conflicting dropout", function()
    local model = gpt2.GPT2LMHeadModel(gpt2.GPT2Config(TINY))
    local ids = accel.randint(0, 40, {1, 4})
    local function fails(pattern, f)
      local ok, err = pcall(f)
      assert.is_false(ok)
      assert.matches(pattern, tostring(err))
    end
    fails("give targets %(already shifted%) or labels", function() return model(ids, {targets = ids, labels = ids}) end)
    fails("max_new_tokens must be a positive integer", function() return model:generate(ids, {max_new_tokens = -1}) end)
    fails("temperature %(=%-1%) must be a number >= 0", function() return model:generate(ids, {temperature = -1}) end)
    fails("dropout = 0.2 disagrees with attn_pdrop = 0", function() return gpt2.GPT2Config{dropout = 0.2, attn_pdrop = 0} end)
    fails("layer_norm_epsilon must be a positive number", function() return gpt2.GPT2Config{layer_norm_epsilon = "x"} end)
    fails("num_parameters: unknown option", function() return model:num_parameters({exlude_embeddings = true}) end)
    local all = model:num_parameters()
    model.transformer.wpe.weight:requires_grad_(false)
    assert.are.equal(all - model.transformer.wpe.weight:numel(), model:num_parameters({only_trainable = true}))
  end)

  it("config:save_pretrained keeps the inert keys it was given (pad_token_id, use_cache)", function()
    local dir = tmpdir()
    gpt2.GPT2Config{vocab_size = 40, pad_token_id = 7, use_cache = false}:save_pretrained(dir)
    local back = gpt2.config_from_dict(json.decode(read(dir .. "/config.json")))
    assert.are.equal(7, back.pad_token_id)
    assert.are.equal(false, back.use_cache)
    C.fs_remove_tree(dir)
  end)

  it("from_pretrained reads a sharded save_model (index json + shards)", function()
    accel.set_seed(8)
    local config = gpt2.GPT2Config(TINY)
    local model = gpt2.GPT2LMHeadModel(config)
    local dir = tmpdir()
    accel.Accelerator{}:save_model(model, dir, {max_shard_size = 8000})
    config:save_pretrained(dir)
    assert.is_nil(C.file_size(dir .. "/model.safetensors"))
    assert.is_not_nil(C.file_size(dir .. "/model.safetensors.index.json"))
    local again = gpt2.GPT2LMHeadModel.from_pretrained(dir)
    local ids = accel.randint(0, 40, {2, 5})
    assert.is_true(again(ids):equal(model(ids)))
    C.fs_remove_tree(dir)
  end)

  it("from_pretrained accepts HF variants: attn.bias buffers, tied lm_head.weight, GPT2Model names", function()
    accel.set_seed(4)
    local config = gpt2.GPT2Config(TINY)
    local model = gpt2.GPT2LMHeadModel(config)
    local dir = tmpdir()
    config:save_pretrained(dir)
    local sd = {}
    for k, v in pairs(model:state_dict()) do sd[k:gsub("^transformer%.", "")] = v end
    sd["lm_head.weight"] = model.transformer.wte.weight:detach()
    sd["h.0.attn.bias"] = accel.ones(1, 1, 12, 12):tril()
    sd["h.1.attn.masked_bias"] = accel.tensor(-1e4)
    accel.save(sd, dir .. "/model.safetensors", {format = "pt"})
    local again
    -- dropped without a word, as transformers (its _keys_to_ignore_on_load_unexpected)
    assert.are.equal("", stderr_of(function() again = gpt2.GPT2LMHeadModel.from_pretrained(dir) end))
    local ids = accel.randint(0, 40, {1, 9})
    assert.is_true(again(ids):equal(model(ids)))
    C.fs_remove_tree(dir)
  end)
end)

describe("GPT-2 checkpoints with weights of other heads", function()
  it("from_pretrained loads them and reports the extra key under its name in the file, as transformers", function()
    accel.set_seed(10)
    local config = gpt2.GPT2Config(TINY)
    local model = gpt2.GPT2LMHeadModel(config)
    local dir = tmpdir()
    config:save_pretrained(dir)
    local sd = model:state_dict()
    sd["multiple_choice_head.summary.weight"] = accel.zeros(1, 16) -- GPT2DoubleHeadsModel's head
    accel.save(sd, dir .. "/model.safetensors", {format = "pt"})
    local again
    local err = stderr_of(function() again = gpt2.GPT2LMHeadModel.from_pretrained(dir) end)
    -- transformers 5.24's load report names it "multiple_choice_head.summary.weight" (UNEXPECTED)
    assert.is_truthy(err:find("unexpected keys): multiple_choice_head.summary.weight\n", 1, true), err)
    local ids = accel.randint(0, 40, {1, 9})
    assert.is_true(again(ids):equal(model(ids)))
    C.fs_remove_tree(dir)
  end)
end)

describe("GPT-2 numerics against PyTorch (float32, 1e-4)", function()
  local f = accel.load(FIXTURE, {device = accel.get_default_device()}) -- where the suite runs

  it("one block (B=2, T=16, C=32, H=4): forward, d/dx and every parameter gradient", function()
    local config = gpt2.GPT2Config{n_embd = 32, n_head = 4, dropout = 0}
    local block = gpt2.GPT2Block(config, 0)
    local w = weights(f, "block.")
    assert.are.equal(12, count(w))
    block:load_state_dict(w)
    local x = f["block.x"]:clone():requires_grad_(true)
    local y = block(x)
    assert_close(y, f["block.y"], "block output")
    local projected = (y * f["block.r"]):sum()
    projected:backward()
    assert_close(x.grad, f["block.dx"], "d/dx")
    local n = 0
    for name, p in block:named_parameters() do
      assert_close(p.grad, f["block_grad." .. name], "d/d " .. name)
      n = n + 1
    end
    assert.are.equal(12, n)
  end)

  it("tiny GPT (V=24, T=7, L=2, H=2, C=8): logits, loss and every gradient (tied wte included)", function()
    local config = gpt2.GPT2Config{vocab_size = 24, n_positions = 8, n_embd = 8, n_layer = 2, n_head = 2, dropout = 0}
    local model = gpt2.GPT2LMHeadModel(config)
    model:load_state_dict(weights(f, "gpt."))
    local logits, loss = model(f["gpt.input_ids"], {targets = f["gpt.targets"]})
    assert_close(logits, f["gpt.logits"], "logits")
    assert_close(loss, f["gpt.loss"], "loss")
    loss:backward()
    local n = 0
    for name, p in model:named_parameters() do
      assert_close(p.grad, f["gpt_grad." .. name], "d loss / d " .. name)
      n = n + 1
    end
    assert.are.equal(2 + 2 * 12 + 2, n)
  end)

  it("the same under the Accelerator's prepared model (fp32) and with HF-style labels", function()
    local config = gpt2.GPT2Config{vocab_size = 24, n_positions = 8, n_embd = 8, n_layer = 2, n_head = 2, dropout = 0}
    local model = accel.Accelerator{mixed_precision = "no"}:prepare(gpt2.GPT2LMHeadModel(config))
    model:load_state_dict(weights(f, "gpt."))
    local ids, tgt = f["gpt.input_ids"], f["gpt.targets"]
    local logits, loss = model(ids, {targets = tgt})
    assert_close(logits, f["gpt.logits"], "logits")
    assert_close(loss, f["gpt.loss"], "loss")
    -- HF's labels are shifted inside: logits[:, t] is scored against labels[:, t + 1]
    local _, l2 = model(ids, {labels = tgt})
    local want = accel.nn.functional.cross_entropy(f["gpt.logits"]:narrow(2, 1, 6):reshape(-1, 24),
      tgt:narrow(2, 2, 6):reshape(-1))
    assert.is_true(math.abs(l2:item() - want:item()) <= TOL * want:item())
  end)
end)

describe("GPT-2 behaviour", function()
  it("is causal: changing token t changes no logits before t", function()
    accel.set_seed(5)
    local model = gpt2.GPT2LMHeadModel(gpt2.GPT2Config(TINY))
    local ids = accel.randint(0, 40, {2, 10})
    local base = model(ids)
    local other = ids:clone()
    other[1][7] = (ids[1][7]:item() + 1) % 40
    local changed = model(other)
    assert.is_true(changed:narrow(2, 1, 6):equal(base:narrow(2, 1, 6)))
    assert.is_true((changed:narrow(2, 7, 4) - base:narrow(2, 7, 4)):abs():max():item() > 1e-6)
    assert.is_true(changed[2]:equal(base[2]))
  end)

  it("generate: prompt kept, reproducible under set_seed, top_k = 1 and temperature 0 are greedy", function()
    accel.set_seed(6)
    local model = gpt2.GPT2LMHeadModel(gpt2.GPT2Config(TINY))
    local prompt = accel.tensor({{1, 2, 3}, {4, 5, 6}})
    accel.set_seed(7)
    local a = model:generate(prompt, {max_new_tokens = 15, temperature = 1.5})
    accel.set_seed(7)
    local b = model:generate(prompt, {max_new_tokens = 15, temperature = 1.5})
    assert.are.same({2, 18}, shape_of(a))
    assert.is_true(a:equal(b))
    assert.is_true(a:narrow(2, 1, 3):equal(prompt))
    assert.is_true(a:min():item() >= 0 and a:max():item() < 40)
    local g1 = model:generate(prompt, {max_new_tokens = 15, top_k = 1})
    local g2 = model:generate(prompt, {max_new_tokens = 15, temperature = 0})
    assert.is_true(g1:equal(g2))
    -- greedy: each new id is the argmax of the logits of the sequence so far
    local seq = g2:narrow(2, 1, 12)
    local _, best = model(seq):select(2, -1):max(2)
    assert.is_true(best:equal(g2:select(2, 13)))
    assert.is_true(model.training) -- generate restores train mode
  end)

  it("greedy generate picks the first of tied maxima (torch.argmax) and draws nothing from the generator", function()
    accel.set_seed(3)
    local model = gpt2.GPT2LMHeadModel{vocab_size = 300, n_positions = 16, n_embd = 16, n_layer = 1, n_head = 2,
      tie_word_embeddings = false}
    model:eval()
    local prompt = accel.tensor({{1, 2, 3}})
    accel.no_grad(function()
      local w = model.lm_head.weight
      local h = model.transformer(prompt):select(2, -1):reshape(16)
      for _, r in ipairs({299, 150, 7, 200}) do w:select(1, r + 1):copy_(h * 10) end -- equal, largest logits
    end)
    local last = model(prompt):select(2, -1):reshape(300)
    assert.are.equal(last[8]:item(), last[300]:item())
    local s1, s2 = accel.get_rng_state()
    for _, o in ipairs({{do_sample = false}, {temperature = 0}}) do
      o.max_new_tokens = 1
      assert.are.equal(7, model:generate(prompt, o)[1][4]:item()) -- torch.argmax: the first maximal index
    end
    assert.are.same({s1, s2}, {accel.get_rng_state()}) -- as transformers' greedy search
  end)

  it("sampling follows softmax(logits / temperature) over HF's top-k (ties at the k-th value kept)", function()
    -- logits fixed to L: ln_f gives its bias e_1 whatever the input, lm_head's first column is L
    local L = {0, 1, 2, 0.5, -1, 3, 2, -0.5}
    local model = gpt2.GPT2LMHeadModel{vocab_size = 8, n_positions = 4, n_embd = 8, n_layer = 1, n_head = 2,
      tie_word_embeddings = false}
    accel.no_grad(function()
      model.transformer.ln_f.weight:zero_()
      model.transformer.ln_f.bias:zero_()[1] = 1
      model.lm_head.weight:zero_():select(2, 1):copy_(accel.tensor(L))
    end)
    local N = 4000
    local prompt = accel.zeros(N, 1, {dtype = accel.int64})
    assert.is_true(model(prompt:narrow(1, 1, 1)):reshape(8):equal(accel.tensor(L)))
    -- transformers 5.24: softmax after TemperatureLogitsWarper(0.7); after TopKLogitsWarper(2), which keeps 3 ids
    local cases = {
      {{temperature = 0.7}, {0.008664, 0.036152, 0.150852, 0.017698, 0.002076, 0.629465, 0.150852, 0.004241}},
      {{top_k = 2}, {0, 0, 0.211942, 0, 0, 0.576117, 0.211942, 0}},
    }
    for i, c in ipairs(cases) do
      accel.set_seed(20 + i)
      c[1].max_new_tokens = 1
      local counts = {0, 0, 0, 0, 0, 0, 0, 0}
      for _, id in ipairs(model:generate(prompt, c[1]):select(2, 2):tolist()) do counts[id + 1] = counts[id + 1] + 1 end
      local chi2, cells = 0, 0
      for v = 1, 8 do
        local e = c[2][v] * N
        if e == 0 then assert.are.equal(0, counts[v]) else chi2, cells = chi2 + (counts[v] - e) ^ 2 / e, cells + 1 end
      end
      -- chi-squared quantile 0.999: 24.32 with 7 degrees of freedom, 13.82 with 2
      assert(chi2 < (cells == 8 and 24.32 or 13.82), ("case %d: chi2 %.1f over %d cells"):format(i, chi2, cells))
    end
  end)

  it("GPT2Config takes HF's aliases and the keys that change nothing here, as HF does", function()
    local c = gpt2.GPT2Config{hidden_size = 64, num_attention_heads = 4, num_hidden_layers = 3,
      max_position_embeddings = 32, use_cache = false, pad_token_id = 0, summary_type = "cls_index"}
    assert.are.same({64, 4, 3, 32}, {c.n_embd, c.n_head, c.n_layer, c.n_positions})
    local d = gpt2.config_from_dict{model_type = "gpt2", hidden_size = 64, num_hidden_layers = 3,
      num_attention_heads = 4, vocab_size = 10}
    assert.are.same({64, 3, 4, 10}, {d.n_embd, d.n_layer, d.n_head, d.vocab_size})
    fails_with(function() gpt2.GPT2Config{hidden_size = 64, n_embd = 32} end,
      "GPT2Config: hidden_size = 64 disagrees with n_embd = 32")
    fails_with(function() gpt2.GPT2Config{add_cross_attention = true} end, "add_cross_attention = true is not supported")
    -- HF's strict config refuses them too ("Field 'use_cache' expected bool, got int")
    for _, k in ipairs({"scale_attn_weights", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn",
      "tie_word_embeddings", "use_cache", "summary_use_proj", "summary_proj_to_labels", "add_cross_attention"}) do
      fails_with(function() gpt2.GPT2Config{[k] = 0} end, "GPT2Config: " .. k .. " must be true or false, got number 0")
      fails_with(function() gpt2.GPT2Config{[k] = "false"} end, "GPT2Config: " .. k .. ' must be true or false, got string "false"')
    end
    fails_with(function() gpt2.config_from_dict{model_type = "gpt2", tie_word_embeddings = 0} end,
      "GPT2Config: tie_word_embeddings must be true or false, got number 0")
  end)

  it("refuses bad input with one clear error at the caller's line", function()
    local model = gpt2.GPT2LMHeadModel(gpt2.GPT2Config(TINY))
    local int = {dtype = accel.int64}
    fails_with(function() model(accel.zeros(1, 13, int)) end, "GPT2Model: sequence length 13 is longer than n_positions (12)")
    fails_with(function() model(accel.zeros(1, 4)) end, "GPT2Model: input_ids must be an integer tensor, got accel.float32")
    fails_with(function() model(accel.zeros(4, int)) end, "GPT2Model: input_ids must be a 2-D tensor (batch, time)")
    fails_with(function() model(accel.zeros(1, 4, int), {target = 1}) end,
      'GPT2LMHeadModel: unknown option "target" (targets, labels, ignore_index)')
    fails_with(function() model(accel.zeros(1, 4, int), {targets = accel.zeros(1, 3, int)}) end,
      "GPT2LMHeadModel: targets must have the shape of input_ids")
    fails_with(function() gpt2.GPT2Config{n_embd = 30, n_head = 4} end, "GPT2Config: n_embd (30) must be divisible by n_head (4)")
    fails_with(function() gpt2.GPT2Config{n_layers = 3} end, 'GPT2Config: unknown option "n_layers"')
    fails_with(function() gpt2.GPT2Config{activation_function = "swiglu"} end, 'activation_function "swiglu" is not supported')
    fails_with(function() gpt2.GPT2LMHeadModel.from_pretrained("/nonexistent/dir") end,
      "from_pretrained: /nonexistent/dir has no config.json")
    fails_with(function() model:generate(accel.zeros(1, 2, int), {top_k = 0}) end, "generate: top_k must be a positive integer")
  end)
end)

-- transformers 5.24 (GPT2LMHeadModel with TINY's config, save_pretrained(d, max_shard_size=8000)):
-- each weight's shard number in model.safetensors.index.json, of 5.
local HF_SHARDS_8000 = {
  ["transformer.wte.weight"] = 1, ["transformer.wpe.weight"] = 1, ["transformer.h.0.ln_1.weight"] = 1,
  ["transformer.h.0.ln_1.bias"] = 1, ["transformer.h.0.attn.c_attn.weight"] = 1, ["transformer.h.0.attn.c_attn.bias"] = 1,
  ["transformer.h.0.attn.c_proj.weight"] = 1, ["transformer.h.0.attn.c_proj.bias"] = 1, ["transformer.h.0.ln_2.weight"] = 1,
  ["transformer.h.0.ln_2.bias"] = 1, ["transformer.h.0.mlp.c_fc.weight"] = 2, ["transformer.h.0.mlp.c_fc.bias"] = 2,
  ["transformer.h.0.mlp.c_proj.weight"] = 3, ["transformer.h.0.mlp.c_proj.bias"] = 3, ["transformer.h.1.ln_1.weight"] = 3,
  ["transformer.h.1.ln_1.bias"] = 3, ["transformer.h.1.attn.c_attn.weight"] = 3, ["transformer.h.1.attn.c_attn.bias"] = 3,
  ["transformer.h.1.attn.c_proj.weight"] = 4, ["transformer.h.1.attn.c_proj.bias"] = 4, ["transformer.h.1.ln_2.weight"] = 4,
  ["transformer.h.1.ln_2.bias"] = 4, ["transformer.h.1.mlp.c_fc.weight"] = 4, ["transformer.h.1.mlp.c_fc.bias"] = 4,
  ["transformer.h.1.mlp.c_proj.weight"] = 5, ["transformer.h.1.mlp.c_proj.bias"] = 5, ["transformer.ln_f.weight"] = 5,
  ["transformer.ln_f.bias"] = 5,
}

-- mean over rows of logsumexp(row) - row[target + 1], in float64 (Lua numbers)
local function cross_entropy_f64(rows, targets)
  local total = 0
  for i, row in ipairs(rows) do
    local m = -math.huge
    for _, x in ipairs(row) do m = math.max(m, x) end
    local z = 0
    for _, x in ipairs(row) do z = z + math.exp(x - m) end
    total = total + m + math.log(z) - row[targets[i] + 1]
  end
  return total / #rows
end

describe("GPT-2 in half precision and transformers' keyword arguments", function()
  it("a bf16 model's loss is float32, from the float32 logits (transformers' ForCausalLMLoss)", function()
    accel.set_seed(11)
    local model = gpt2.GPT2LMHeadModel(TINY):to(accel.bfloat16)
    local ids = accel.tensor({{1, 5, 9, 3, 7, 2, 8}})
    local logits, loss = model(ids, {labels = ids})
    assert.are.equal(accel.bfloat16, logits.dtype) -- as transformers: logits in the model's dtype, loss float32
    assert.are.equal(accel.float32, loss.dtype)
    local rows = logits:squeeze(1):double():tolist()
    local want = cross_entropy_f64({table.unpack(rows, 1, 6)}, {5, 9, 3, 7, 2, 8})
    assert.is_true(math.abs(loss:item() - want) <= 1e-5 * want, ("labels: %.8f vs %.8f"):format(loss:item(), want))
    local _, tloss = model(ids, {targets = ids})
    assert.are.equal(accel.float32, tloss.dtype)
    want = cross_entropy_f64(rows, {1, 5, 9, 3, 7, 2, 8})
    assert.is_true(math.abs(tloss:item() - want) <= 1e-5 * want, ("targets: %.8f vs %.8f"):format(tloss:item(), want))
  end)

  it("save_pretrained shards as transformers (max_shard_size) and records the dtype; from_pretrained takes torch_dtype", function()
    accel.set_seed(12)
    local model = gpt2.GPT2LMHeadModel(TINY)
    local dir = tmpdir()
    model:save_pretrained(dir, {max_shard_size = 8000, safe_serialization = true})
    local index = json.decode(read(dir .. "/model.safetensors.index.json"))
    assert.are.equal(29696, index.metadata.total_size)
    local got = {}
    for k, file in pairs(index.weight_map) do got[k] = tonumber(file:match("^model%-(%d+)%-of%-00005%.safetensors$")) end
    assert.are.same(HF_SHARDS_8000, got)
    local half = gpt2.GPT2LMHeadModel.from_pretrained(dir, {torch_dtype = accel.bfloat16})
    for name, p in half:named_parameters() do
      assert.are.equal(accel.bfloat16, p.dtype, name)
      assert.is_true(p:equal(model:state_dict()[name]:bfloat16()), name)
    end
    assert.are.equal(accel.float16, gpt2.GPT2LMHeadModel.from_pretrained(dir, {dtype = "float16"}).transformer.wte.weight.dtype)
    -- a bf16 model saved: config.json says so (transformers writes "bfloat16"), "auto" loads it in bf16
    local dir2 = tmpdir()
    half:save_pretrained(dir2)
    assert.are.equal("bfloat16", json.decode(read(dir2 .. "/config.json")).torch_dtype)
    assert.is_not_nil(C.file_size(dir2 .. "/model.safetensors"))
    local auto = gpt2.GPT2LMHeadModel.from_pretrained(dir2, {torch_dtype = "auto"})
    assert.are.equal(accel.bfloat16, auto.transformer.h[1].mlp.c_fc.weight.dtype)
    assert.are.equal(accel.float32, gpt2.GPT2LMHeadModel.from_pretrained(dir2).transformer.wte.weight.dtype)
    fails_with(function() gpt2.GPT2LMHeadModel.from_pretrained(dir, {torch_dtype = accel.bfloat16, bogus = 1}) end,
      "from_pretrained: unknown option 'bogus'")
    fails_with(function() gpt2.GPT2LMHeadModel.from_pretrained(dir, {torch_dtype = accel.int64}) end,
      "from_pretrained: torch_dtype must be \"auto\" or a floating dtype")
    fails_with(function() model:save_pretrained(dir, {max_shard_size = "1KB", bogus = true}) end,
      "save_pretrained: unknown option 'bogus'")
    fails_with(function() model:save_pretrained(dir, {safe_serialization = false}) end,
      "save_pretrained: only safetensors is written")
    C.fs_remove_tree(dir)
    C.fs_remove_tree(dir2)
  end)

  it("num_parameters takes transformers' positional (only_trainable, exclude_embeddings)", function()
    local model = gpt2.GPT2LMHeadModel(TINY)
    -- transformers 5.24, the same config: num_parameters(True) 7424, num_parameters(True, True) 6592
    assert.are.equal(7424, model:num_parameters(true))
    assert.are.equal(6592, model:num_parameters(true, true))
    assert.are.equal(6592, model:num_parameters(false, true))
    fails_with(function() model:num_parameters("yes") end, "num_parameters: argument 'only_trainable' (position 1) must be boolean")
  end)

  it("generate refuses a do_sample that is not a boolean", function()
    local model = gpt2.GPT2LMHeadModel(TINY)
    fails_with(function() model:generate(accel.tensor({{1, 2}}), {max_new_tokens = 2, do_sample = "no"}) end,
      'generate: do_sample must be true or false, got string "no"')
  end)
end)

describe("examples/gpt.lua", function()
  it("makes every fortune \"%\" separator line blank: the first line and several in a row too", function()
    local dir = tmpdir()
    local text = "%\nfirst saying\n%\n%\nsecond saying\n%\n" .. string.rep("more words here\n%\n", 30) .. "%"
    support.write_file(dir .. "/in.txt", text)
    local cmd = ("%s examples/gpt.lua --steps=1 --n_layer=1 --n_head=2 --n_embd=32 --block_size=16 --batch_size=2 "
      .. "--sample_tokens=1 --eval_batches=1 --threads=1 --out_dir=%s %s 2>&1"):format(BIN, dir .. "/run", dir .. "/in.txt")
    local p = assert(io.popen(cmd))
    local out = p:read("a")
    assert(p:close() == true, "examples/gpt.lua failed:\n" .. out)
    local decoded = {}
    for _, name in ipairs({"train", "val"}) do -- 1024-byte header, then one little-endian uint16 per byte of text
      local bin = read(dir .. "/run/data/" .. name .. ".bin")
      for i = 1025, #bin, 2 do decoded[#decoded + 1] = bin:sub(i, i) end
    end
    local got = table.concat(decoded)
    assert.are.equal((text:gsub("%%", "")), got)
    C.fs_remove_tree(dir)
  end)

  it("trains a tiny config on README.md: validation loss falls, sample printed, HF files + checkpoints + logs", function()
    local dir = tmpdir()
    local cmd = ("%s examples/gpt.lua --steps=40 --n_layer=1 --n_head=2 --n_embd=32 --block_size=32 --batch_size=8 "
      .. "--warmup=5 --eval_interval=20 --eval_batches=2 --save_interval=20 --log_interval=20 --sample_tokens=40 "
      .. "--threads=1 --out_dir=%s README.md 2>&1"):format(BIN, dir)
    local p = assert(io.popen(cmd))
    local out = p:read("a")
    local ok = p:close()
    assert(ok == true, "examples/gpt.lua failed:\n" .. out)
    local first, last = out:match("validation loss ([%d.]+) %-> ([%d.]+)")
    assert(first and last, "no validation summary in:\n" .. out)
    assert(tonumber(last) < tonumber(first) - 1, out)
    assert.is_truthy(out:find("step    40 | loss", 1, true))
    assert.is_truthy(out:find("---- sample", 1, true))
    local tensors = accel.load(dir .. "/model/model.safetensors")
    assert.are.same({256, 32}, shape_of(tensors["transformer.wte.weight"]))
    assert.are.same({32, 96}, shape_of(tensors["transformer.h.0.attn.c_attn.weight"]))
    assert.are.equal(256, json.decode(read(dir .. "/model/config.json")).vocab_size)
    assert.is_not_nil(C.file_size(dir .. "/checkpoints/checkpoint_1/checkpoint_index.json"))
    local metrics = read(dir .. "/gpt/metrics.jsonl")
    assert.is_truthy(metrics:find('"val_loss"', 1, true))
    local events = false
    for _, f in ipairs(C.fs_listdir(dir .. "/gpt")) do events = events or f:find("^events%.out%.tfevents%.") ~= nil end
    assert.is_true(events)
    C.fs_remove_tree(dir)
  end)
end)
