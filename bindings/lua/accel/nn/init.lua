-- accel.nn: neural-network building blocks. This release holds the
-- functional interface (accel.nn.functional); modules come with the
-- training issue.
local nn = {}
nn.functional = require("accel.nn.functional")
return nn
