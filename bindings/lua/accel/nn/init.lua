-- accel.nn: PyTorch's torch.nn in Lua. The pieces live in files next to this
-- one (this file is the module accel.nn itself):
--   module.lua        nn.Module (the class idiom is documented there),
--                     nn.Parameter
--   containers.lua    Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict
--   layers.lua        Linear, Embedding, LayerNorm, RMSNorm, Dropout, Conv2d,
--                     MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, Dropout2d,
--                     Flatten, Unflatten, Identity, activations
--   normalization.lua BatchNorm1d / 2d / 3d, GroupNorm  } loaded on first use of
--   sequence.lua      Conv1d, RNN, LSTM, GRU, the cells   } one of their classes
--   transformer.lua   TransformerEncoderLayer, TransformerEncoder, }
--                     TransformerDecoderLayer, TransformerDecoder,}
--                     Transformer                         }
--   upsampling.lua    Upsample                            }
--   activations.lua   ReLU6, Hardtanh, ..., PReLU, GLU    } (and their F functions)
--   pooling1d.lua     MaxPool1d, AvgPool1d, AdaptiveAvgPool1d, PairwiseDistance, CosineSimilarity }
--   padding.lua       ZeroPad1d..3d, ConstantPad*, ReflectionPad*, ReplicationPad*, CircularPad* }
--   attention.lua     MultiheadAttention
--   loss.lua          CrossEntropyLoss, NLLLoss, MSELoss, L1Loss, BCEWithLogitsLoss,
--                     BCELoss, SmoothL1Loss, HuberLoss, KLDivLoss
--   initializers.lua  nn.init (uniform_, kaiming_uniform_, ...)
--   functional.lua    nn.functional
-- Any other accel/nn/<name>.lua (e.g. nn.utils) loads on first use of nn.<name>.
local base = require("accel.nn.module")

local nn = {}
nn.Module = base.Module
nn.Parameter = base.Parameter
nn.is_module = base.is_module
nn.is_parameter = base.is_parameter
nn.deepcopy = base.deepcopy
nn.functional = require("accel.nn.functional")
nn.init = require("accel.nn.initializers")

for _, file in ipairs({"containers", "layers", "attention", "loss"}) do
  for name, cls in pairs(require("accel.nn." .. file)) do nn[name] = cls end
end

-- Classes whose file loads on first use: name -> file.
local LAZY_CLASSES = {BatchNorm1d = "normalization", BatchNorm2d = "normalization", BatchNorm3d = "normalization",
                      SyncBatchNorm = "normalization",
                      GroupNorm = "normalization", InstanceNorm1d = "normalization",
                      InstanceNorm2d = "normalization", InstanceNorm3d = "normalization", Conv1d = "sequence", RNN = "sequence", LSTM = "sequence",
                      GRU = "sequence", RNNCell = "sequence", LSTMCell = "sequence", GRUCell = "sequence",
                      TransformerEncoderLayer = "transformer", TransformerEncoder = "transformer",
                      TransformerDecoderLayer = "transformer", TransformerDecoder = "transformer",
                      Transformer = "transformer", Upsample = "upsampling", ConvTranspose1d = "conv_transpose",
                      ConvTranspose2d = "conv_transpose", ConvTranspose3d = "conv_transpose", PixelShuffle = "upsampling",
                      PixelUnshuffle = "upsampling"}
for _, name in ipairs({"ReLU6", "Hardtanh", "Hardsigmoid", "Hardswish", "Mish", "SELU", "CELU", "PReLU", "Softsign",
                       "Tanhshrink", "GLU", "Threshold", "Softmin", "Hardshrink", "Softshrink"}) do
  LAZY_CLASSES[name] = "activations"
end
LAZY_CLASSES.Softmax2d, LAZY_CLASSES.Bilinear = "activations", "bilinear"
LAZY_CLASSES.AdaptiveMaxPool1d, LAZY_CLASSES.AdaptiveMaxPool2d = "adaptive_max_pool", "adaptive_max_pool"
LAZY_CLASSES.AdaptiveMaxPool3d = "adaptive_max_pool"
LAZY_CLASSES.Unfold, LAZY_CLASSES.Fold, LAZY_CLASSES.LocalResponseNorm = "fold", "fold", "normalization"
LAZY_CLASSES.EmbeddingBag, LAZY_CLASSES.CTCLoss = "embedding_bag", "ctc_loss"
LAZY_CLASSES.FractionalMaxPool2d, LAZY_CLASSES.FractionalMaxPool3d = "fractional_max_pool", "fractional_max_pool"
LAZY_CLASSES.LPPool1d, LAZY_CLASSES.LPPool2d, LAZY_CLASSES.LPPool3d = "pooling1d", "pooling1d", "pooling1d"
LAZY_CLASSES.MultiMarginLoss, LAZY_CLASSES.MultiLabelMarginLoss = "ranking_loss", "ranking_loss"
LAZY_CLASSES.RReLU, LAZY_CLASSES.AlphaDropout = "activations", "activations"
LAZY_CLASSES.FeatureAlphaDropout = "activations"
LAZY_CLASSES.MaxUnpool1d, LAZY_CLASSES.MaxUnpool2d, LAZY_CLASSES.MaxUnpool3d = "max_unpool", "max_unpool", "max_unpool"
for _, name in ipairs({"Conv3d", "MaxPool3d", "AvgPool3d", "AdaptiveAvgPool3d"}) do LAZY_CLASSES[name] = "volumetric" end
LAZY_CLASSES.PoissonNLLLoss, LAZY_CLASSES.GaussianNLLLoss = "likelihood_loss", "likelihood_loss"
for _, name in ipairs({"MarginRankingLoss", "HingeEmbeddingLoss", "SoftMarginLoss", "CosineEmbeddingLoss",
                       "TripletMarginLoss", "MultiLabelSoftMarginLoss"}) do
  LAZY_CLASSES[name] = "ranking_loss"
end
for _, name in ipairs({"MaxPool1d", "AvgPool1d", "AdaptiveAvgPool1d", "PairwiseDistance", "CosineSimilarity"}) do
  LAZY_CLASSES[name] = "pooling1d"
end
for _, kind in ipairs({"ZeroPad", "ConstantPad", "ReflectionPad", "ReplicationPad", "CircularPad"}) do
  for dims = 1, 3 do LAZY_CLASSES[kind .. dims .. "d"] = "padding" end
end

-- PyTorch's modules accel-lua does not provide: a clear error, not nil.
local NOT_PROVIDED = {}
for _, name in ipairs({"LazyLinear"}) do
  NOT_PROVIDED[name] = true
end

-- nn.X for an unknown X: a lazily loaded class, or the embedded module
-- accel.nn.X when there is one.
setmetatable(nn, {
  __index = function(t, k)
    if type(k) ~= "string" then return nil end
    if LAZY_CLASSES[k] then
      for name, cls in pairs(require("accel.nn." .. LAZY_CLASSES[k])) do rawset(t, name, cls) end
      return rawget(t, k)
    end
    if package.preload["accel.nn." .. k] == nil then return nil end
    local m = require("accel.nn." .. k)
    rawset(t, k, m)
    return m
  end,
})
return require("accel.util").not_provided(nn, NOT_PROVIDED, "accel.nn", "docs/nn.md lists the modules there are")
