--[[
Unit tests for spank_hooks/job_submit.lua, run with plain Lua 5.1:

    lua5.1 tests/lua/test_job_submit.lua

No rocks needed.  The `slurm` global is a fake of the few functions the filter
uses (this is the unit level; tests/slurm/test_filter.py runs the filter inside
a real slurmctld).  Exit status 0 when every test passes.
--]]

local ROOT = (arg and arg[0] or ""):match("^(.*)/tests/lua/[^/]*$") or "."
local FILTER = ROOT .. "/spank_hooks/job_submit.lua"

-- ------------------------------------------------------------------ fake slurm

local logs = {}
slurm = {
    SUCCESS = 0,
    ERROR = -1,
    log_info = function(fmt, ...) logs[#logs + 1] = "info: " .. string.format(fmt, ...) end,
    log_error = function(fmt, ...) logs[#logs + 1] = "error: " .. string.format(fmt, ...) end,
    log_debug = function(fmt, ...) logs[#logs + 1] = "debug: " .. string.format(fmt, ...) end,
    user_msg = function(fmt, ...) logs[#logs + 1] = "user: " .. string.format(fmt, ...) end,
}
local REAL_SLURM = slurm
local REAL_EXIT = os.exit

PAL_FILTER_TEST = true
local pal = dofile(FILTER)
assert(type(pal) == "table", "filter did not return its module table under PAL_FILTER_TEST")
assert(type(slurm_job_submit) == "function" and type(slurm_job_modify) == "function")

-- ------------------------------------------------------------------ runner

local tests, failures = {}, {}
local function test(name, fn)
    tests[#tests + 1] = { name = name, fn = fn }
end

local function show(v)
    if type(v) == "string" then
        return string.format("%q", v)
    end
    return tostring(v)
end

local function eq(actual, expected, what)
    if actual ~= expected then
        error((what or "value") .. ": expected " .. show(expected) .. ", got " .. show(actual), 2)
    end
end

local function truthy(v, what)
    if not v then
        error((what or "condition") .. " is false", 2)
    end
end

local function log_has(pattern)
    for _, line in ipairs(logs) do
        if line:find(pattern, 1, true) then
            return true
        end
    end
    return false
end

-- ------------------------------------------------------------------ fixtures

local NOW = 1764495000
local tmpfiles = {}
local function tmpname()
    local p = os.tmpname()
    tmpfiles[#tmpfiles + 1] = p
    return p
end

local function write(path, text)
    local f = assert(io.open(path, "wb"))
    f:write(text)
    f:close()
end

--- Percent-encode as the placer does: every byte outside [A-Za-z0-9._-] as %XX.
local function enc(v)
    return (string.gsub(tostring(v), "[^%w._-]", function(c)
        return string.format("%%%02X", string.byte(c))
    end))
end

--- A state table (the fields the placer writes) as a format-2 state file.
local function render(s)
    local lines = { "# pal-slurm filter state (format 2); test", "format 2" }
    local function add(line)
        lines[#lines + 1] = line
    end
    if s.mode ~= nil then add("mode " .. enc(s.mode)) end
    for _, key in ipairs({ "heartbeat", "stale_after", "hold_s" }) do
        if s[key] ~= nil then add(key .. " " .. tostring(s[key])) end
    end
    if s.wake then add("wake 1") end
    for _, m in ipairs(s.models or {}) do add("model " .. enc(m)) end
    for _, c in ipairs(s.unheld_classes or {}) do add("unheld " .. enc(c)) end
    for _, r in ipairs(s.rules or {}) do
        local fields = {}
        for _, key in ipairs({ "id", "user", "name", "account", "partition", "class" }) do
            if r[key] ~= nil then fields[#fields + 1] = key .. "=" .. enc(r[key]) end
        end
        add("rule " .. table.concat(fields, " "))
    end
    return table.concat(lines, "\n") .. "\n"
end

local function state_table(over)
    local s = {
        mode = "enforce", heartbeat = os.time(), stale_after = 30,
        models = { "v100" }, rules = {},
    }
    for k, v in pairs(over or {}) do
        s[k] = v
    end
    return s
end

-- the state file lives in a directory of its own: the wake-up file is beside it
local STATE_DIR = os.tmpname()
os.remove(STATE_DIR)
assert(os.execute("mkdir -m 700 '" .. STATE_DIR .. "'") == 0, "cannot create " .. STATE_DIR)
local STATE_PATH = STATE_DIR .. "/filter-state"
local WAKE_PATH = STATE_DIR .. "/placer-wake"
tmpfiles[#tmpfiles + 1] = STATE_PATH
tmpfiles[#tmpfiles + 1] = WAKE_PATH
local KILL_PATH = tmpname()
os.remove(KILL_PATH)

local real_getenv = os.getenv
os.getenv = function(name)
    if name == "PAL_FILTER_STATE" then
        return STATE_PATH
    elseif name == "PAL_FILTER_KILL_SWITCH" then
        return KILL_PATH
    end
    return real_getenv(name)
end

--- Write the state file (table or raw text) and forget the cached copy.
local function set_state(s)
    if type(s) == "table" then
        write(STATE_PATH, render(s))
    elseif s == nil then
        os.remove(STATE_PATH)
    else
        write(STATE_PATH, s)
    end
    pal.reset_cache()
end

--- The state parsed from a text, or nil and the reason.
local function parse(text)
    return pal.parse_state(text)
end

local function job(over)
    local j = { name = "train", user_name = "alice", account = "proj", partition = "gpu", priority = pal.NO_VAL,
        het_job_offset = pal.NO_VAL, immediate = 0 }
    for k, v in pairs(over or {}) do
        j[k] = v
    end
    return j
end

--- Run the real Slurm callback on a job table; returns the job and the rc.
local function submit(j)
    local rc = slurm_job_submit(j, {}, 1000)
    return j, rc
end

--- Held the way the filter holds: a begin time in the future (never priority 0) and the tag.
local function held(j)
    return type(j.begin_time) == "number" and j.begin_time > os.time() and j.priority ~= 0
        and type(j.admin_comment) == "string" and j.admin_comment:find("^pal:held ") ~= nil
end

-- ------------------------------------------------------------------ parse_tres / find_gpu_requests

test("parse_tres: 22.05 and 24.11 prefixes, typed and untyped, = form", function()
    local cases = {
        { "gres:gpu:2", ":", nil, ":", 2 },
        { "gres/gpu:2", "/", nil, ":", 2 },
        { "gres:gpu:v100:2", ":", "v100", ":", 2 },
        { "gres/gpu:v100:2", "/", "v100", ":", 2 },
        { "gres/gpu:v100=1", "/", "v100", "=", 1 },
        { "gres/gpu=3", "/", nil, "=", 3 },
        { "gres:gpu", ":", nil, nil, 1 },
        { "gres:gpu:v100", ":", "v100", nil, 1 },
        { "gres:gpu:1k", ":", nil, ":", 1024 },
        { "gres/gpu:v100_g2:1", "/", "v100_g2", ":", 1 },
    }
    for _, c in ipairs(cases) do
        local e = pal.parse_tres(c[1])[1]
        truthy(e.gres, c[1] .. " gres")
        eq(e.name, "gpu", c[1] .. " name")
        eq(e.sep, c[2], c[1] .. " sep")
        eq(e.type, c[3], c[1] .. " type")
        eq(e.delim, c[4], c[1] .. " delim")
        eq(e.count, c[5], c[1] .. " count")
    end
end)

test("parse_tres: lists with other GRES and non-gres items keep raw text", function()
    local es = pal.parse_tres("cpu=4,gres/gpu:2,gres/shard:2,gres:mps:100")
    eq(#es, 4)
    eq(es[1].gres, false, "cpu item")
    eq(es[1].raw, "cpu=4")
    eq(es[3].name, "shard")
    eq(es[4].name, "mps")
    eq(es[4].count, 100)
    eq(pal.join_tres(es), "cpu=4,gres/gpu:2,gres/shard:2,gres:mps:100")
end)

test("parse_tres: absent and odd values never raise", function()
    eq(#pal.parse_tres(nil), 0)
    eq(#pal.parse_tres(""), 0)
    eq(#pal.parse_tres(42), 0)
    local odd = pal.parse_tres("gres:gpu:v100:2:x,gres:,gres:gpu:lots")
    eq(odd[1].count, nil, "too many fields")
    eq(odd[2].name, nil, "empty name")
    eq(odd[3].type, "lots", "non-count word is a type")
end)

test("find_gpu_requests: every request field is looked at", function()
    for _, field in ipairs({ "tres_per_node", "tres_per_job", "tres_per_socket", "tres_per_task" }) do
        for _, prefix in ipairs({ "gres:gpu:", "gres/gpu:" }) do
            local r = pal.find_gpu_requests({ [field] = prefix .. "2" })
            truthy(r.any, field .. " " .. prefix)
            eq(r.total, 2, field .. " " .. prefix .. " total")
            eq(r.typed, false)
        end
    end
    local r = pal.find_gpu_requests({ tres_per_task = "cpu=2,gres/gpu:v100_g1=1" })
    eq(r.total, 1)
    truthy(r.slot, "slot type in = form")
end)

test("find_gpu_requests: non-GPU GRES only and zero GPUs", function()
    local r = pal.find_gpu_requests({ tres_per_node = "gres:mps:100,gres/shard:2" })
    eq(r.any, false)
    r = pal.find_gpu_requests({ tres_per_node = "gres:gpu:0" })
    eq(r.any, true)
    eq(r.total, 0)
    r = pal.find_gpu_requests({})
    eq(r.any, false)
end)

-- ------------------------------------------------------------------ bare type rewrite

local MODELS = { v100 = true }

test("rewrite_bare_types: both prefixes, separator and delimiter kept", function()
    local cases = {
        { "gres:gpu:v100:2", "gres:gpu:2" },
        { "gres/gpu:v100:2", "gres/gpu:2" },
        { "gres/gpu:v100=1", "gres/gpu=1" },
        { "gres:gpu:V100:3", "gres:gpu:3" },
        { "gres:gpu:v100", "gres:gpu" },
        { "gres:gpu:v100:1k", "gres:gpu:1k" },
        { "gres:gpu:v100:2,gres:mps:100", "gres:gpu:2,gres:mps:100" },
        { "cpu=2,gres/gpu:v100=1", "cpu=2,gres/gpu=1" },
    }
    for _, c in ipairs(cases) do
        local out, found = pal.rewrite_bare_types(c[1], MODELS)
        eq(out, c[2], c[1])
        eq(found[1], "v100", c[1] .. " model")
    end
end)

test("rewrite_bare_types: values as slurmctld passes them (captured on 22.05.8 and 24.11.5)", function()
    local cases = {
        -- 22.05: --gres=gpu:v100:2 / --gpus=v100:2 / --gpus-per-task=v100:1
        { "gres:gpu:v100:2", "gres:gpu:2" },
        { "gres:gpu:v100:1", "gres:gpu:1" },
        -- 24.11: --gres=gpu:v100:2, --gres=gpu:v100 (no count), --gpus-per-task=v100:1, --gpus-per-socket=v100:1
        { "gres/gpu:v100:2", "gres/gpu:2" },
        { "gres/gpu:v100", "gres/gpu" },
        { "gres/gpu:v100=1", "gres/gpu=1" },
    }
    for _, c in ipairs(cases) do
        eq((pal.rewrite_bare_types(c[1], MODELS)), c[2], c[1])
    end
    -- 24.11 untyped forms are GPU requests of the right size
    eq(pal.find_gpu_requests({ tres_per_node = "gres/gpu" }).total, 1)
    eq(pal.find_gpu_requests({ tres_per_task = "gres/gpu=1" }).total, 1)
end)

test("rewrite_bare_types: leaves slot types, unknown types, untyped and nil alone", function()
    for _, v in ipairs({ "gres:gpu:v100_g0:1", "gres:gpu:a100:1", "gres:gpu:2", "gres:mps:v100:1" }) do
        local out, found = pal.rewrite_bare_types(v, MODELS)
        eq(out, v)
        eq(#found, 0, v)
    end
    eq(pal.rewrite_bare_types(nil, MODELS), nil)
    eq(pal.rewrite_bare_types("gres:gpu:v100:2", nil), "gres:gpu:v100:2", "no models, no rewrite")
end)

test("add_features: alone, &-joined, parenthesised around |, no duplicates", function()
    eq(pal.add_features(nil, { "v100" }), "v100")
    eq(pal.add_features("", { "v100" }), "v100")
    eq(pal.add_features("ib", { "v100" }), "ib&v100")
    eq(pal.add_features("ib&nvme", { "v100" }), "ib&nvme&v100")
    eq(pal.add_features("rack1|rack2", { "v100" }), "(rack1|rack2)&v100")
    eq(pal.add_features("[rack1|rack2]", { "v100" }), "[rack1|rack2]&v100")
    eq(pal.add_features("v100&ib", { "v100" }), "v100&ib")
    eq(pal.add_features("v100|ib", { "v100" }), "(v100|ib)&v100")
    eq(pal.add_features("v100*2", { "v100" }), "v100*2&v100")
    eq(pal.add_features("ib", {}), "ib")
end)

test("submit: bare type rewritten in enforce mode (and job held)", function()
    set_state(state_table())
    local j = submit(job({ tres_per_node = "gres:gpu:v100:2", features = "ib" }))
    eq(j.tres_per_node, "gres:gpu:2")
    eq(j.features, "ib&v100")
    truthy(held(j), "held")
end)

test("submit: bare type rewritten in observe mode, job not held", function()
    set_state(state_table({ mode = "observe" }))
    local j = submit(job({ tres_per_job = "gres/gpu:v100:4", features = "a|b" }))
    eq(j.tres_per_job, "gres/gpu:4")
    eq(j.features, "(a|b)&v100")
    eq(j.priority, pal.NO_VAL)
    eq(j.begin_time, nil)
    eq(j.admin_comment, nil)
end)

test("submit: bare type rewritten with a stale heartbeat too", function()
    set_state(state_table({ heartbeat = os.time() - 3600 }))
    local j = submit(job({ tres_per_task = "gres/gpu:v100=1" }))
    eq(j.tres_per_task, "gres/gpu=1")
    eq(j.features, "v100")
    eq(held(j), false)
end)

test("submit: without a state file nothing is rewritten", function()
    set_state(nil)
    local j = submit(job({ tres_per_node = "gres:gpu:v100:2" }))
    eq(j.tres_per_node, "gres:gpu:v100:2")
    eq(j.features, nil)
    eq(held(j), false)
end)

-- ------------------------------------------------------------------ class hint

test("class_hint: each source", function()
    local c, s = pal.class_hint({ spank_job_env = { [0] = "_SLURM_SPANK_OPTION_pal_pal_class=b" } }, {})
    eq(c, "B") eq(s, "spank")
    c, s = pal.class_hint({ comment = "nightly run pal:class=C please" }, {})
    eq(c, "C") eq(s, "comment")
    c, s = pal.class_hint({ user_name = "alice", name = "train" },
        { { user = "bob", class = "A", id = "r1" }, { user = "alice", name = "train", class = "D", id = "r2" } })
    eq(c, "D") eq(s, "rule:r2")
    c, s = pal.class_hint({ user_name = "carol" }, { { user = "alice", class = "A", id = "r1" } })
    eq(c, "auto") eq(s, "default")
    c, s = pal.class_hint({ spank_job_env = { [0] = "_SLURM_SPANK_OPTION_pal_pal_class=OFF" } }, nil)
    eq(c, "off")
    c, s = pal.class_hint({ partition = "gpu", account = "x" }, { { partition = "gpu", account = "x", class = "a" } })
    eq(c, "A") eq(s, "rule:1", "rule without id is named by position")
end)

test("class_hint: precedence spank > comment > rule", function()
    local rules = { { user = "alice", class = "D", id = "r" } }
    local v = { user_name = "alice", comment = "pal:class=C",
        spank_job_env = { [0] = "OTHER=1", [1] = "_SLURM_SPANK_OPTION_pal_pal_class=A" } }
    local c, s = pal.class_hint(v, rules)
    eq(c, "A") eq(s, "spank")
    v.spank_job_env = nil
    c, s = pal.class_hint(v, rules)
    eq(c, "C") eq(s, "comment")
    v.comment = "no hint here"
    c, s = pal.class_hint(v, rules)
    eq(c, "D") eq(s, "rule:r")
end)

test("class_hint: invalid hint gives auto and a warning", function()
    local c, s, w = pal.class_hint({ comment = "pal:class=Z" }, {})
    eq(c, "auto") eq(s, "comment")
    truthy(w and w:find("invalid class hint", 1, true), "warning text")
    c, s, w = pal.class_hint({ spank_job_env = { [0] = "_SLURM_SPANK_OPTION_pal_pal_class=bogus" } }, {})
    eq(c, "auto")
    truthy(w, "warning for spank")
    c, s, w = pal.class_hint({}, { { class = "E", id = "bad" } })
    eq(c, "auto") eq(s, "rule:bad")
    truthy(w, "warning for rule")
end)

test("submit: class sources end up in admin_comment", function()
    set_state(state_table({ rules = { { user = "alice", class = "B", id = "rule-3" } } }))
    local j = submit(job({ tres_per_node = "gres:gpu:1" }))
    eq(j.admin_comment, "pal:held class=B src=rule:rule-3")
    j = submit(job({ tres_per_node = "gres:gpu:1", comment = "pal:class=d" }))
    eq(j.admin_comment, "pal:held class=D src=comment")
    j = submit(job({ tres_per_node = "gres:gpu:1", spank_job_env = { [0] = "_SLURM_SPANK_OPTION_pal_pal_class=A" } }))
    eq(j.admin_comment, "pal:held class=A src=spank")
    j = submit(job({ tres_per_node = "gres:gpu:1", user_name = "zed" }))
    eq(j.admin_comment, "pal:held class=auto src=default")
end)

test("submit: invalid hint logs a line and holds as auto", function()
    set_state(state_table())
    logs = {}
    local j = submit(job({ tres_per_node = "gres:gpu:1", comment = "pal:class=Q" }))
    eq(j.admin_comment, "pal:held class=auto src=comment")
    truthy(log_has("invalid class hint"), "log line")
end)

-- ------------------------------------------------------------------ hold conditions

test("hold: fresh enforce GPU job via each request field", function()
    set_state(state_table())
    for _, field in ipairs({ "tres_per_node", "tres_per_job", "tres_per_socket", "tres_per_task" }) do
        local j = submit(job({ [field] = "gres/gpu:1" }))
        truthy(held(j), field)
    end
end)

test("hold: through the begin time, hold_s from the state (default 90 s), priority untouched", function()
    set_state(state_table())
    local t0 = os.time()
    local j = submit(job({ tres_per_node = "gres:gpu:1" }))
    truthy(held(j), "held")
    eq(j.priority, pal.NO_VAL, "priority not set: Slurm still validates the job at submit")
    truthy(j.begin_time >= t0 + 90 and j.begin_time <= os.time() + 90, "begin = now + 90 (default)")
    set_state(state_table({ hold_s = 25 }))
    t0 = os.time()
    j = submit(job({ tres_per_node = "gres:gpu:1" }))
    truthy(held(j), "held with hold_s 25")
    truthy(j.begin_time >= t0 + 25 and j.begin_time <= os.time() + 25, "begin = now + hold_s")
    for _, bad in ipairs({ 0, pal.MAX_HOLD_SECONDS + 1 }) do
        set_state(state_table({ hold_s = bad }))
        t0 = os.time()
        j = submit(job({ tres_per_node = "gres:gpu:1" }))
        truthy(j.begin_time >= t0 + 90 and j.begin_time <= os.time() + 90, "hold_s out of range: default")
    end
    set_state(state_table({ hold_s = "soon" }))
    logs = {}
    j = submit(job({ tres_per_node = "gres:gpu:1" }))
    eq(held(j), false, "hold_s not a number: the file is refused, nothing held")
    truthy(log_has('hold_s is not an integer: "soon"'), "says why")
end)

test("hold: a begin time in the past or now (--begin=now) is replaced by the hold", function()
    set_state(state_table({ hold_s = 40 }))
    local t0 = os.time()
    local j = submit(job({ tres_per_node = "gres:gpu:1", begin_time = t0 - 5 }))
    truthy(held(j), "held")
    truthy(j.begin_time >= t0 + 40, "begin moved to now + hold_s")
end)

test("hold: admin_comment preserved after the tag", function()
    set_state(state_table())
    local j = submit(job({ tres_per_node = "gres:gpu:1", admin_comment = "ticket 42" }))
    eq(j.admin_comment, "pal:held class=auto src=default | ticket 42")
end)

local function not_held(over, state_over, why)
    set_state(state_table(state_over))
    local before = job(over)
    local j = submit(job(over))
    eq(held(j), false, why)
    eq(j.priority, before.priority, why .. " priority")
    eq(j.begin_time, before.begin_time, why .. " begin_time")
    eq(j.admin_comment, before.admin_comment, why .. " admin_comment")
end

test("no hold: a job with its own --begin in the future", function()
    not_held({ tres_per_node = "gres:gpu:1", begin_time = os.time() + 3600 }, nil, "own begin")
    local v = job({ tres_per_node = "gres:gpu:1", begin_time = NOW + 10 })
    local h, r = pal.should_hold(v, pal.find_gpu_requests(v), "A", state_table({ heartbeat = NOW }), NOW)
    eq(h, false)
    eq(r, "own begin time")
end)

test("no hold: stale heartbeat", function()
    not_held({ tres_per_node = "gres:gpu:1" }, { heartbeat = os.time() - 31 }, "stale")
end)

test("no hold: heartbeat far in the future", function()
    not_held({ tres_per_node = "gres:gpu:1" }, { heartbeat = os.time() + 3600 }, "future")
end)

test("no hold: heartbeat missing", function()
    set_state("format 2\nmode enforce\nmodel v100\n")
    local j = submit(job({ tres_per_node = "gres:gpu:1" }))
    eq(held(j), false)
end)

test("no hold: observe mode logs what it would do", function()
    logs = {}
    not_held({ tres_per_node = "gres:gpu:1", name = 'we"ird\nname' }, { mode = "observe" }, "observe")
    truthy(log_has('pal: observe job "we\\"ird\\nname" would hold class=auto'), "observe line, escaped name")
end)

test("no hold: kill switch means nothing at all, not even the rewrite", function()
    set_state(state_table())
    write(KILL_PATH, "")
    logs = {}
    local j = submit(job({ tres_per_node = "gres:gpu:v100:1" }))
    os.remove(KILL_PATH)
    eq(j.tres_per_node, "gres:gpu:v100:1")
    eq(held(j), false)
    eq(#logs, 0, "no log lines")
end)

test("no hold: required nodes", function()
    not_held({ tres_per_node = "gres:gpu:1", req_nodes = "pal-n1" }, nil, "req_nodes")
end)

test("no hold: slot types", function()
    not_held({ tres_per_node = "gres:gpu:v100_g0:1" }, nil, "slot")
    not_held({ tres_per_node = "gres:gpu:v100_g0:1,gres:gpu:v100_g3:1" }, nil, "two slots")
    not_held({ tres_per_task = "gres/gpu:v100_g2=1" }, nil, "slot = form")
end)

test("no hold: a GPU type that is not a known model", function()
    not_held({ tres_per_node = "gres:gpu:a100:1" }, nil, "unknown type")
end)

test("no hold: arrays", function()
    not_held({ tres_per_node = "gres:gpu:1", array_inx = "0-3" }, nil, "array")
end)

test("no hold: het job component", function()
    not_held({ tres_per_node = "gres:gpu:1", het_job_offset = 0 }, nil, "het 0")
    not_held({ tres_per_node = "gres:gpu:1", het_job_offset = 1 }, nil, "het 1")
end)

test("no hold: --hold already", function()
    not_held({ tres_per_node = "gres:gpu:1", priority = 0 }, nil, "user hold")
end)

test("no hold: --immediate", function()
    not_held({ tres_per_node = "gres:gpu:1", immediate = 1 }, nil, "immediate")
end)

test("no hold: class off from each source", function()
    not_held({ tres_per_node = "gres:gpu:1", spank_job_env = { [0] = "_SLURM_SPANK_OPTION_pal_pal_class=off" } },
        nil, "spank off")
    not_held({ tres_per_node = "gres:gpu:1", comment = "pal:class=off" }, nil, "comment off")
    not_held({ tres_per_node = "gres:gpu:1" }, { rules = { { user = "alice", class = "off", id = "x" } } }, "rule off")
end)

test("no hold: zero GPUs, non-GPU GRES only, no GRES", function()
    not_held({ tres_per_node = "gres:gpu:0" }, nil, "zero")
    not_held({ tres_per_job = "gres/gpu:0" }, nil, "zero per job")
    not_held({ tres_per_node = "gres:mps:100" }, nil, "mps")
    not_held({ tres_per_node = "gres/shard:2" }, nil, "shard")
    not_held({}, nil, "cpu only")
end)

test("hold: GPU request mixed with other GRES", function()
    set_state(state_table())
    local j = submit(job({ tres_per_node = "gres:gpu:2,gres:mps:100" }))
    truthy(held(j))
    eq(j.tres_per_node, "gres:gpu:2,gres:mps:100")
end)

test("should_hold reasons", function()
    local st = { mode = "enforce", heartbeat = NOW, stale_after = 30 }
    local v = { tres_per_node = "gres:gpu:1" }
    local gpus = pal.find_gpu_requests(v)
    local h, r = pal.should_hold(v, gpus, "A", st, NOW + 30)
    eq(h, true) eq(r, "enforce")
    h, r = pal.should_hold(v, gpus, "A", st, NOW + 31)
    eq(h, false) eq(r, "stale heartbeat")
    h, r = pal.should_hold(v, gpus, "off", st, NOW)
    eq(r, "class off")
    h, r = pal.should_hold(v, gpus, "A", nil, NOW)
    eq(r, "no state")
    h, r = pal.should_hold(v, gpus, "A", { mode = "observe", heartbeat = NOW, stale_after = 30 }, NOW)
    eq(r, "mode observe")
end)

test("a class the placer leaves to Slurm is not held; the others are", function()
    local st = { mode = "enforce", heartbeat = NOW, stale_after = 30, unheld = { D = true } }
    local v = { tres_per_node = "gres:gpu:1" }
    local gpus = pal.find_gpu_requests(v)
    local h, r = pal.should_hold(v, gpus, "D", st, NOW)
    eq(h, false) eq(r, "class D has nothing to choose")
    h, r = pal.should_hold(v, gpus, "A", st, NOW)
    eq(h, true) eq(r, "enforce")
    local s = assert(parse("format 2\nmode enforce\nheartbeat " .. NOW .. "\nunheld D\nunheld \n"))
    eq(s.unheld.D, true, "D read") eq(s.unheld.A, nil, "A not") eq(s.unheld[""], nil, "empty ignored")
end)

-- ------------------------------------------------------------------ waking the placer

local function size_of(path)
    local f = io.open(path, "rb")
    if not f then
        return nil
    end
    local n = f:seek("end")
    f:close()
    return n
end

test("wake: a held job appends one byte to placer-wake beside the state file, each time", function()
    write(WAKE_PATH, "")
    set_state(state_table({ wake = true }))
    local j = submit(job({ tres_per_node = "gres:gpu:1" }))
    truthy(held(j), "held")
    eq(size_of(WAKE_PATH), 1, "one poke")
    submit(job({ tres_per_node = "gres:gpu:2" }))
    eq(size_of(WAKE_PATH), 2, "a second poke grows the file again")
end)

test("wake: no poke for a job not held, in observe mode, with a stale heartbeat, or without `wake 1`", function()
    write(WAKE_PATH, "")
    set_state(state_table({ wake = true }))
    submit(job({}))                                           -- no GPUs
    submit(job({ tres_per_node = "gres:gpu:1", req_nodes = "n1" }))
    eq(size_of(WAKE_PATH), 0, "not held: not poked")
    set_state(state_table({ wake = true, mode = "observe" }))
    submit(job({ tres_per_node = "gres:gpu:1" }))
    eq(size_of(WAKE_PATH), 0, "observe: not poked")
    set_state(state_table({ wake = true, heartbeat = os.time() - 3600 }))
    submit(job({ tres_per_node = "gres:gpu:1" }))
    eq(size_of(WAKE_PATH), 0, "stale heartbeat: not poked")
    set_state(state_table())
    truthy(held((submit(job({ tres_per_node = "gres:gpu:1" })))), "held")
    eq(size_of(WAKE_PATH), 0, "no `wake 1`: not poked")
    for _, v in ipairs({ "0", "yes", "true", "1 ", "" }) do
        eq(assert(parse("format 2\nwake " .. v .. "\n")).wake, false, "wake " .. v)
    end
end)

test("wake: the path is fixed beside the state file; a state file cannot name another", function()
    eq(pal.wake_path("/var/lib/pal/placer/filter-state"), "/var/lib/pal/placer/placer-wake")
    eq(pal.wake_path("/filter-state"), "/placer-wake")
    eq(pal.wake_path("rel/dir/state"), "rel/dir/placer-wake")
    eq(pal.wake_path("filter-state"), "placer-wake")
    eq(pal.wake_path(""), nil) eq(pal.wake_path(nil), nil)
    local victim = tmpname()
    write(victim, "keep")
    write(WAKE_PATH, "")
    for _, text in ipairs({ "wake " .. victim, "wake_file " .. victim, "wake " .. enc(victim) }) do
        set_state(render(state_table()) .. text .. "\n")
        local j = submit(job({ tres_per_node = "gres:gpu:1" }))
        truthy(held(j), "held: " .. text)
        eq(size_of(victim), 4, "the named file is never written: " .. text)
        eq(size_of(WAKE_PATH), 0, "and without `wake 1` nothing is poked: " .. text)
    end
    -- `wake 1` and a path on another line: the fixed file, never the named one
    set_state(render(state_table({ wake = true })) .. "wake " .. victim .. "\nwake 1\n")
    submit(job({ tres_per_node = "gres:gpu:1" }))
    eq(size_of(victim), 4, "victim untouched")
    eq(size_of(WAKE_PATH), 1, "the fixed file poked")
end)

test("wake: a wake-up file that cannot be opened never fails the submission", function()
    os.remove(WAKE_PATH)
    assert(os.execute("mkdir '" .. WAKE_PATH .. "'") == 0)   -- a directory: io.open fails
    set_state(state_table({ wake = true }))
    local j, rc = submit(job({ tres_per_node = "gres:gpu:1" }))
    os.remove(WAKE_PATH)
    eq(rc, slurm.SUCCESS) truthy(held(j), "held anyway")
    eq(pal.poke(nil), false) eq(pal.poke("/nonexistent-pal-dir/x"), false)
end)

-- ------------------------------------------------------------------ state file

test("state: every field is read", function()
    local s = assert(parse(table.concat({
        "# pal-slurm filter state (format 2); written by pal placer; do not edit",
        "",
        "format 2",
        "mode enforce",
        "heartbeat 1765000000",
        "stale_after 45",
        "hold_s 600",
        "wake 1",
        "model v100",
        "model A100-SXM4",
        "unheld A",
        "unheld C",
        "rule id=3 user=alice name=train%20job class=B",
        "rule id=r-4 account=proj partition=gpu class=off",
        "",
    }, "\n")))
    eq(s.format, 2) eq(s.mode, "enforce") eq(s.heartbeat, 1765000000) eq(s.stale_after, 45) eq(s.hold_s, 600)
    eq(s.wake, true)
    eq(s.models.v100, true) eq(s.models["a100-sxm4"], true, "models lower-cased") eq(s.models["A100-SXM4"], nil)
    eq(s.unheld.A, true) eq(s.unheld.C, true) eq(s.unheld.B, nil)
    eq(#s.rules, 2)
    local r = s.rules[1]
    eq(r.id, "3") eq(r.user, "alice") eq(r.name, "train job") eq(r.class, "B") eq(r.account, nil)
    r = s.rules[2]
    eq(r.id, "r-4") eq(r.account, "proj") eq(r.partition, "gpu") eq(r.class, "off") eq(r.user, nil)
    eq(pal.class_hint({ user_name = "alice", name = "train job" }, s.rules), "B")
end)

test("state: defaults when a field is missing; the filter's semantics for odd values", function()
    local s = assert(parse("format 2\n"))
    eq(s.mode, "observe") eq(s.heartbeat, nil) eq(s.stale_after, 30) eq(s.hold_s, 90) eq(s.wake, false)
    eq(next(s.models), nil) eq(next(s.unheld), nil) eq(#s.rules, 0)
    s = assert(parse("format 2\nmode yes\nstale_after -1\nhold_s 0\nmodel \nmodel V100\n"))
    eq(s.mode, "observe", "unknown mode") eq(s.stale_after, 30, "negative stale_after") eq(s.hold_s, 90, "hold_s 0")
    eq(s.models[""], nil, "empty model") eq(s.models.v100, true)
    eq(assert(parse("format 2\nmode ENFORCE\n")).mode, "observe", "modes are lower case")
    eq(assert(parse("format 2\nstale_after 0\n")).stale_after, 0)
    eq(assert(parse("format 2\nhold_s 86400\n")).hold_s, 86400)
    eq(assert(parse("format 2\nhold_s 86401\n")).hold_s, 90)
    eq(assert(parse("format 2\nhold_s 1\n")).hold_s, 1)
    eq(assert(parse("format 2\nheartbeat -5\n")).heartbeat, -5)
    eq(assert(parse("format 2\nheartbeat 007\n")).heartbeat, 7)
    eq(assert(parse("format 2\nmode enforce\nmode observe\n")).mode, "observe", "the last line wins")
end)

test("state: a number that is not a plain integer refuses the file, and says which", function()
    for _, v in ipairs({ "1.5", "1e9", "0x10", " 5", "5 ", "", "-", "+5", "nan", "inf", "1234567890123456",
        "5\0" }) do
        for _, key in ipairs({ "heartbeat", "stale_after", "hold_s" }) do
            local s, err = parse("format 2\nmode enforce\n" .. key .. " " .. v .. "\n")
            eq(s, nil, key .. " " .. v)
            truthy(err:find(key .. " is not an integer", 1, true), err)
            truthy(err:find("line 3", 1, true), err)
        end
    end
end)

test("state: values are percent-decoded, awkward bytes and all", function()
    local s = assert(parse("format 2\nrule user=a%20b name=%3D%25%0A%C3%BC%22%27%5C class=%41 account=%zz%4%\n"
        .. "rule name=%e2%82%ac partition=x%2\n"))
    local r = s.rules[1]
    eq(r.user, "a b") eq(r.name, "=%\n\195\188\"'\\") eq(r.class, "A")
    eq(r.account, "%zz%4%", "a % without two hex digits stays")
    eq(s.rules[2].name, "\226\130\172", "lower-case hex") eq(s.rules[2].partition, "x%2")
    eq(pal.percent_decode("plain"), "plain")
    eq(pal.percent_decode("%41%42%43"), "ABC")
end)

test("state: unknown keys and rule fields are skipped (a newer placer may add some)", function()
    local s = assert(parse("format 2\nmode enforce\nfuture_key some value\nFORMAT 3\nmodels v100\n"
        .. "rule id=1 color=red user=bob novalue class=C =x\nmodel a100\n"))
    eq(s.mode, "enforce") eq(s.models.a100, true) eq(s.models.v100, nil, "`models` is not `model`")
    local r = s.rules[1]
    eq(r.user, "bob") eq(r.class, "C") eq(r.id, "1") eq(r.color, nil) eq(r.novalue, nil)
end)

test("state: CR LF line ends are read like LF ones", function()
    local s = assert(parse("# comment\r\nformat 2\r\nmode enforce\r\nheartbeat 12\r\nwake 1\r\nmodel V100\r\n"
        .. "rule user=alice class=A\r\n\r\n"))
    eq(s.mode, "enforce") eq(s.heartbeat, 12) eq(s.wake, true) eq(s.models.v100, true)
    eq(s.rules[1].class, "A") eq(s.rules[1].user, "alice")
    eq(assert(parse("format 2\r\nmode enforce")).mode, "enforce", "no line end at the end")
end)

test("state: `format 2` must come first; a format-1 Lua file of an older placer is refused", function()
    local format1 = table.concat({
        "-- written by pal placer; do not edit (pal-slurm filter state, format 1)",
        "return {",
        "  format = 1,", '  mode = "enforce",', "  heartbeat = " .. os.time() .. ",", "  stale_after = 30,",
        '  models = { "v100" },', "  rules = {", "  },", "}", "",
    }, "\n")
    set_state(format1)
    logs = {}
    local j = submit(job({ tres_per_node = "gres:gpu:v100:1" }))
    eq(held(j), false, "nothing held")
    eq(j.tres_per_node, "gres:gpu:v100:1", "nothing rewritten")
    truthy(log_has("no usable filter state (unknown state format"), "says why")
    for _, text in ipairs({ "", "\n\n# only comments\n", "mode enforce\nformat 2\n", "format 1\n", "format 3\n",
        "format  2\n", "format 2 \n", " format 2\n", "FORMAT 2\n", "format\n", "return { format = 2 }\n",
        string.dump(function() return { format = 2 } end) }) do
        local s, err = parse(text)
        eq(s, nil, pal.quote(text))
        truthy(err:find("unknown state format", 1, true), err)
    end
end)

test("state: a refused or missing file holds and rewrites nothing, and is logged", function()
    for _, text in ipairs({ "return {", "format 9\n", "\0\1\2\255garbage", "format 2\nheartbeat soon\n" }) do
        set_state(text)
        logs = {}
        local j = submit(job({ tres_per_node = "gres:gpu:v100:1" }))
        eq(held(j), false, text)
        eq(j.tres_per_node, "gres:gpu:v100:1", text)
        truthy(log_has("no usable filter state"), "log for " .. text)
    end
    set_state(nil)
    local s, err = pal.load_state(STATE_PATH)
    eq(s, nil)
    truthy(err:find("cannot open", 1, true))
end)

test("state: garbage and binary are refused or skipped, never run", function()
    local attacks = {
        "os.exit(3) return {}",
        "slurm.SUCCESS = 99 return {}",
        "slurm_job_submit = nil return {}",
        "return { format = 2, mode = print and 'enforce' or 'observe', heartbeat = os.time() }",
        "return ('x'):rep(256 * 1024 * 1024)",
        "io.open('/tmp/pal-should-not-exist', 'w') return {}",
        "format 2\nmode os.exit(3)\nheartbeat " .. os.time() .. "\n",
        -- code on lines of its own: unknown keys, skipped; the rest of the file stands (held)
        { "format 2\nmode enforce\nheartbeat " .. os.time() .. "\nos.exit(3)\nslurm.SUCCESS = 99\n"
            .. "io.open('/tmp/pal-should-not-exist', 'w')\nreturn ('x'):rep(256 * 1024 * 1024)\n" },
    }
    local exit_called = false
    os.exit = function() exit_called = true error("os.exit reached", 0) end
    for _, attack in ipairs(attacks) do
        local text, holds = attack, false
        if type(attack) == "table" then
            text, holds = attack[1], true
        end
        set_state(text)
        local j, rc = submit(job({ tres_per_node = "gres:gpu:1" }))
        eq(exit_called, false, "os.exit reached by " .. text)
        eq(rc, 0, text .. " rc")
        eq(held(j), holds, text)
        eq(slurm, REAL_SLURM, "slurm global replaced by " .. text)
        eq(slurm.SUCCESS, 0, "slurm.SUCCESS after " .. text)
        eq(type(slurm_job_submit), "function", "callback after " .. text)
    end
    os.exit = REAL_EXIT
    eq(io.open("/tmp/pal-should-not-exist", "r"), nil, "state file wrote a file")
    -- binary lines after the format line are unknown keys: skipped
    local junk = {}
    for b = 0, 255 do
        junk[#junk + 1] = string.char(b, (b * 7) % 256, 0, 255)
    end
    local s = assert(parse("format 2\nmode enforce\n" .. table.concat(junk, "\n") .. "\nheartbeat 5\n"))
    eq(s.mode, "enforce") eq(s.heartbeat, 5)
end)

test("state: oversized files, too many lines, rules or models, and long lines are refused", function()
    local s, err = parse("format 2\n" .. string.rep("#", pal.STATE_MAX_BYTES))
    eq(s, nil) truthy(err:find("larger than", 1, true), err)
    local saved = pal.STATE_MAX_BYTES
    pal.STATE_MAX_BYTES = 100
    set_state("format 2\n" .. string.rep("#", 200))
    s, err = pal.load_state(STATE_PATH)
    pal.STATE_MAX_BYTES = saved
    eq(s, nil) truthy(err:find("larger", 1, true), err)

    local rules = { "format 2" }
    for i = 1, pal.STATE_MAX_RULES do
        rules[#rules + 1] = "rule id=" .. i .. " user=u" .. i .. " class=A"
    end
    s = assert(parse(table.concat(rules, "\n")))
    eq(#s.rules, pal.STATE_MAX_RULES, "exactly the cap: read")
    rules[#rules + 1] = "rule id=x class=B"
    s, err = parse(table.concat(rules, "\n"))
    eq(s, nil) truthy(err:find("more than " .. pal.STATE_MAX_RULES .. " rules", 1, true), err)

    for _, key in ipairs({ "model", "unheld" }) do
        local lines = { "format 2" }
        for i = 1, pal.STATE_MAX_MODELS + 1 do
            lines[#lines + 1] = key .. " m" .. i
        end
        s, err = parse(table.concat(lines, "\n"))
        eq(s, nil) truthy(err:find("more than " .. pal.STATE_MAX_MODELS .. " " .. key, 1, true), err)
        table.remove(lines)
        truthy(parse(table.concat(lines, "\n")), key .. ": exactly the cap is read")
    end

    local fields = {}
    for i = 1, pal.STATE_MAX_RULE_FIELDS do
        fields[i] = "f" .. i .. "=x"
    end
    truthy(parse("format 2\nrule " .. table.concat(fields, " ") .. "\n"), "a rule of the most fields")
    s, err = parse("format 2\nrule " .. table.concat(fields, " ") .. " class=A\n")
    eq(s, nil) truthy(err:find("more than " .. pal.STATE_MAX_RULE_FIELDS .. " fields", 1, true), err)

    s, err = parse("format 2\n" .. string.rep("#\n", pal.STATE_MAX_LINES))
    eq(s, nil) truthy(err:find("more than " .. pal.STATE_MAX_LINES .. " lines", 1, true), err)
    truthy(parse("format 2\n" .. string.rep("#\n", pal.STATE_MAX_LINES - 1)), "exactly the line cap")

    local long = "rule name=" .. string.rep("x", pal.STATE_MAX_LINE - 10)
    eq(#long, pal.STATE_MAX_LINE)
    truthy(parse("format 2\n" .. long .. "\n"), "a line of the longest length")
    truthy(parse("format 2\r\n" .. long .. "\r\n"), "and with CR LF")
    s, err = parse("format 2\n" .. long .. "x\n")
    eq(s, nil) truthy(err:find("line 2 is longer than " .. pal.STATE_MAX_LINE, 1, true), err)
end)

test("state: a 1 MB adversarial file is parsed in bounded time", function()
    local MB = 1024 * 1024
    local function fill(line)
        return "format 2\n" .. string.rep(line .. "\n", math.floor(MB / (#line + 1)))
    end
    local width = pal.STATE_MAX_LINE - 16
    local cases = {
        { "one line", "format 2\n" .. string.rep("x", MB) },
        { "line ends only", "format 2\n" .. string.rep("\n", MB) },
        { "CRs", "format 2\n" .. string.rep("\r", MB) },
        { "percent signs", fill("rule name=" .. string.rep("%", width)) },
        { "escapes", fill("rule name=" .. string.rep("%41", math.floor(width / 3))) },
        { "half escapes", fill("rule name=" .. string.rep("%4", math.floor(width / 2))) },
        { "equals", fill("rule " .. string.rep("=", width)) },
        { "spaces", fill("rule " .. string.rep(" ", width)) },
        { "fields without =", fill("rule " .. string.rep("a ", math.floor(width / 2)) .. "user=x") },
        { "fields", fill("rule " .. string.rep("id=1 ", math.floor(width / 5))) },
        { "models", fill("model " .. string.rep("%41", math.floor(width / 3))) },
        { "a spaced class", fill("rule user=alice class=" .. string.rep("%20", math.floor(width / 7)) .. "A"
            .. string.rep("%20", math.floor(width / 7))) },
        { "rules of the most fields", fill("rule " .. string.rep("name=" .. string.rep("%41", 80) .. " ",
            pal.STATE_MAX_RULE_FIELDS - 1) .. "user=bob") },
        { "many rules", fill("rule user=bob name=" .. string.rep("x", 86) .. " class=A") },
        { "comments", "format 2\n" .. string.rep("#" .. string.rep("(.-)*", 10) .. "\n", math.floor(MB / 52)) },
        { "binary", "format 2\n" .. string.rep("\0\255\1%\r =", math.floor(MB / 7)) },
    }
    local view = { user_name = "alice", name = "train" }
    local worst, worst_name = 0, ""
    for _, c in ipairs(cases) do
        local name, text = c[1], c[2]
        truthy(#text >= MB - pal.STATE_MAX_LINE and #text <= MB + 64, name .. " is about 1 MB: " .. #text)
        local t0 = os.clock()
        local s = pal.parse_state(text)
        if s then
            pal.class_hint(view, s.rules)   -- every rule looked at, the first that matches normalised
        end
        local took = os.clock() - t0
        if name == "a spaced class" or name == "rules of the most fields" or name == "many rules" then
            truthy(s and #s.rules > 100, name .. " is read, not refused")
        end
        if took > worst then
            worst, worst_name = took, name
        end
        truthy(took < 2.0, name .. " took " .. took .. " s")
        if os.getenv("PAL_LUA_TIMES") then
            io.write(string.format("     %-24s %.3f s %s\n", name, took, s and "read" or "refused"))
        end
    end
    io.write(string.format("     (slowest 1 MB state file: %s, %.3f s of CPU)\n", worst_name, worst))
end)

test("state: cached for CACHE_SECONDS, then re-read", function()
    write(STATE_PATH, "format 2\nmode observe\n")
    pal.reset_cache()
    eq(pal.get_state(STATE_PATH, NOW).mode, "observe")
    write(STATE_PATH, "format 2\nmode enforce\n")
    eq(pal.get_state(STATE_PATH, NOW + 1).mode, "observe", "cached")
    eq(pal.get_state(STATE_PATH, NOW + 2).mode, "enforce", "re-read")
    eq(pal.get_state(STATE_PATH, NOW - 10).mode, "enforce", "clock went back: re-read")
end)

test("normalize_class: trims like %s, bounded on a long class", function()
    eq(pal.normalize_class(" \t b \r\n"), "B")
    eq(pal.normalize_class("auto"), "auto") eq(pal.normalize_class("Off"), "off")
    eq(pal.normalize_class(""), nil) eq(pal.normalize_class("   "), nil) eq(pal.normalize_class("A B"), nil)
    eq(pal.normalize_class(5), nil)
    local t0 = os.clock()
    eq(pal.normalize_class(string.rep(" ", 100000) .. "A" .. string.rep(" ", 100000) .. "x"), nil)
    truthy(os.clock() - t0 < 0.5, "linear")
end)

-- ------------------------------------------------------------------ fail open

test("fail open: a Lua error while reading the job returns SUCCESS and logs", function()
    set_state(state_table())
    logs = {}
    local j = setmetatable({}, { __index = function(_, k)
        if k == "comment" then error("boom") end
        return nil
    end })
    local rc = slurm_job_submit(j, {}, 0)
    eq(rc, slurm.SUCCESS)
    truthy(log_has("error: pal: filter error, job left as submitted"), "error logged")
end)

test("fail open: a failing assignment restores what was already written", function()
    set_state(state_table())
    local store = job({ tres_per_node = "gres:gpu:v100:2" })
    local proxy = setmetatable({}, {
        __index = store,
        __newindex = function(_, k, v)
            if k == "begin_time" then error("cannot set begin_time") end
            store[k] = v
        end,
    })
    logs = {}
    local rc = slurm_job_submit(proxy, {}, 0)
    eq(rc, slurm.SUCCESS)
    truthy(log_has("cannot set begin_time"), "error logged")
    truthy(not log_has("pal: held"), "no held line for a job that was not held")
    eq(store.tres_per_node, "gres:gpu:v100:2", "tres restored")
    eq(store.features, "", "features restored to unset")
    eq(store.admin_comment, "", "admin_comment restored to unset")
    eq(store.begin_time, nil, "begin_time never written")
    eq(store.priority, pal.NO_VAL)
end)

test("fail open: a plain Lua bug inside the logic", function()
    set_state(state_table())
    local saved = pal.plan
    pal.plan = function() local t = nil return t.x end
    local j = job({ tres_per_node = "gres:gpu:1" })
    local rc = slurm_job_submit(j, {}, 0)
    pal.plan = saved
    eq(rc, slurm.SUCCESS)
    eq(held(j), false)
end)

test("slurm_job_modify returns SUCCESS and changes nothing", function()
    local j = job({ tres_per_node = "gres:gpu:v100_g1:1" })
    eq(slurm_job_modify(j, {}, {}, 0), slurm.SUCCESS)
    eq(j.tres_per_node, "gres:gpu:v100_g1:1")
end)

test("loading the file in Slurm mode returns SUCCESS", function()
    PAL_FILTER_TEST = nil
    local ok, rv = pcall(dofile, FILTER)
    PAL_FILTER_TEST = true
    truthy(ok, tostring(rv))
    eq(rv, slurm.SUCCESS)
end)

test("quote: control characters and length", function()
    eq(pal.quote("a\nb\tc"), '"a\\nb\\009c"')
    eq(pal.quote(nil), "nil")
    truthy(#pal.quote(string.rep("x", 500)) < 100, "truncated")
end)

-- ------------------------------------------------------------------ run

for _, t in ipairs(tests) do
    logs = {}
    local ok, err = pcall(t.fn)
    os.exit = REAL_EXIT
    if ok then
        io.write("ok   ", t.name, "\n")
    else
        io.write("FAIL ", t.name, "\n     ", tostring(err), "\n")
        failures[#failures + 1] = t.name
    end
end
for _, p in ipairs(tmpfiles) do
    os.remove(p)
end
os.remove(STATE_DIR)
os.getenv = real_getenv
io.write(string.format("%d tests, %d failed\n", #tests, #failures))
REAL_EXIT(#failures == 0 and 0 or 1)
