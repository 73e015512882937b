--[[
pal-slurm submit filter (job_submit/lua, Lua 5.1, runs inside slurmctld).

What it does to a job at submit time, and nothing else:
  1. A bare GPU model type (`--gres=gpu:v100:2`) is rewritten to an untyped
     count in the same field (`gres:gpu:2`) plus the model as a node feature,
     because our gres.conf types every GPU slot (`v100_g<minor>`) and Slurm
     would otherwise reject the bare model.  Observe and enforce mode.
  2. In enforce mode, while the placer's heartbeat is fresh, an eligible GPU
     job is held through its begin time (now + hold_s; it pends with reason
     BeginTime) and tagged in admin_comment
     `pal:held class=<X> src=<source>`; the placer places and
     releases it (StartTime=now), extending the hold while it keeps the job
     waiting.  When the state says `wake 1`, it then appends a byte to the
     placer's wake-up file (`placer-wake` beside the state file: a fixed
     path, never one the state names), so the placer places the job at
     once.  Not `priority = 0`: Slurm skips its submit-time checks for a
     held job, so a request plain Slurm rejects would be accepted and pend
     forever; a begin time keeps every check, and if the placer dies the hold
     ends by itself.

It never rejects a job: every callback returns slurm.SUCCESS, all logic runs
under pcall, and on any error the job is left exactly as submitted.  A
kill-switch file turns it off entirely.  The contract with the placer (what
the filter state file holds, what the filter does with it) is in
docs/admin-guide.md ("slurm.conf, job_submit.lua, plugstack.conf") and
docs/architecture.md ("Placement on Slurm").

The pure logic lives in the local table `pal`.  When the global
PAL_FILTER_TEST is set before this chunk runs, the chunk returns that table so
tests can call the functions outside slurmctld.
--]]

local pal = {}

pal.NO_VAL = 4294967294            -- 0xfffffffe, Slurm's "unset" for uint32 fields
pal.NO_VAL16 = 65534               -- 0xfffe
pal.CACHE_SECONDS = 2
pal.DEFAULT_STATE_PATH = "/var/lib/pal/placer/filter-state"
pal.DEFAULT_KILL_SWITCH = "/etc/pal/filter-disabled"
pal.WAKE_NAME = "placer-wake"      -- the wake-up file, beside the state file
pal.DEFAULT_STALE_AFTER = 30
pal.DEFAULT_HOLD_SECONDS = 90      -- how long a hold lasts unless the placer releases or extends it
pal.MAX_HOLD_SECONDS = 86400
-- The state file's limits (pal_slurm/slurm/filter_state.py writes within the same ones): what
-- slurmctld spends on one read is bounded whatever the file holds.
pal.STATE_FORMAT = "2"
pal.STATE_MAX_BYTES = 4 * 1024 * 1024
pal.STATE_MAX_LINE = 8192          -- bytes in one line, without its line end
pal.STATE_MAX_LINES = 20000
pal.STATE_MAX_RULES = 10000
pal.STATE_MAX_RULE_FIELDS = 32     -- `key=value` fields in one rule (the placer writes at most 6)
pal.STATE_MAX_MODELS = 1000        -- `model` lines; `unheld` lines too
pal.SPANK_OPTION_VAR = "_SLURM_SPANK_OPTION_pal_pal_class"
pal.TRES_FIELDS = { "tres_per_node", "tres_per_job", "tres_per_socket", "tres_per_task" }

local VALID_CLASSES = { A = "A", B = "B", C = "C", D = "D", AUTO = "auto", OFF = "off" }
-- the bytes Lua's %s matches (isspace in the C locale)
local SPACE_BYTES = { [9] = true, [10] = true, [11] = true, [12] = true, [13] = true, [32] = true }
local COUNT_MULT = { [""] = 1, k = 1024, m = 1024 ^ 2, g = 1024 ^ 3, t = 1024 ^ 4, p = 1024 ^ 5 }

-- ---------------------------------------------------------------- helpers

--- Quote a user-controlled string for one log line: %q-style, control bytes
--- as \ddd (Lua 5.1's %q leaves raw newlines), at most 80 characters.
function pal.quote(s)
    if s == nil then
        return "nil"
    end
    s = tostring(s)
    if #s > 80 then
        s = s:sub(1, 80) .. "..."
    end
    local q = string.format("%q", s)
    q = q:gsub("\\\n", "\\n")
    q = q:gsub("[%z\1-\31\127]", function(c)
        return string.format("\\%03d", c:byte())
    end)
    return q
end

local function is_set(v)
    return v ~= nil and v ~= "" and v ~= pal.NO_VAL
end

--- Value of a GRES count string (`2`, `1k`), or nil if it is not one.
function pal.parse_count(s)
    if type(s) ~= "string" then
        return nil
    end
    local digits, suffix = s:match("^(%d+)([kKmMgGtTpP]?)$")
    if not digits then
        return nil
    end
    return tonumber(digits) * COUNT_MULT[suffix:lower()]
end

-- ---------------------------------------------------------------- TRES parsing

--[[
Parse one tres_per_* value into a list of entries, one per comma-separated
item, each keeping its raw text so that unrelated items are written back
byte for byte.  Entry fields:
  raw      the item as submitted
  gres     true for `gres:NAME...` / `gres/NAME...` items
  sep      ":" (22.05) or "/" (24.11), taken from the item
  name     GRES name (`gpu`, `mps`, `shard`, ...)
  type     GRES type or nil
  delim    ":" or "=" before the count (nil when the count is implicit)
  count    numeric count, or nil when it could not be read
Unreadable gres items get count = nil and are never rewritten.
--]]
function pal.parse_tres(value)
    local entries = {}
    if type(value) ~= "string" or value == "" then
        return entries
    end
    for item in (value .. ","):gmatch("([^,]*),") do
        local e = { raw = item, gres = false }
        local sep, rest = item:match("^gres([:/])(.*)$")
        if sep then
            e.gres = true
            e.sep = sep
            local name, tail = rest:match("^([^:=]+)(.*)$")
            e.name = name
            if name == nil then
                e.count = nil
            elseif tail == "" then
                e.count = 1
            elseif tail:sub(1, 1) == "=" then
                e.delim = "="
                e.count = pal.parse_count(tail:sub(2))
            else
                -- tail starts with ":": COUNT | TYPE | TYPE:COUNT | TYPE=COUNT
                local body = tail:sub(2)
                local n = pal.parse_count(body)
                if n then
                    e.delim = ":"
                    e.count = n
                else
                    local t, d, c = body:match("^([^:=]+)([:=])([^:=]*)$")
                    if t then
                        e.type, e.delim, e.count = t, d, pal.parse_count(c)
                    elseif body:match("^[^:=]+$") then
                        e.type, e.count = body, 1
                    end
                end
            end
        end
        entries[#entries + 1] = e
    end
    return entries
end

local function entry_text(e)
    if not e.rewritten then
        return e.raw
    end
    local s = "gres" .. e.sep .. e.name
    if e.type then
        s = s .. ":" .. e.type
    end
    if e.count_text then
        s = s .. (e.delim or ":") .. e.count_text
    end
    return s
end

function pal.join_tres(entries)
    local parts = {}
    for i, e in ipairs(entries) do
        parts[i] = entry_text(e)
    end
    return table.concat(parts, ",")
end

-- a per-slot GRES type `<model token>_g<minor>`: a copy of pal_slurm.slurm.gresconf's
-- rule, checked against it by tests/slurm_adapter/test_lua_filter.py
function pal.is_slot_type(t)
    return type(t) == "string" and t:match("^.+_g%d+$") ~= nil
end

--[[
Summarise the GPU requests of a job view (a plain table with the tres_per_*
fields).  Returns {total, any, typed, slot, unreadable, fields} where total is
the largest GPU count found in any field (enough to decide "more than zero").
--]]
function pal.find_gpu_requests(view)
    local r = { total = 0, any = false, typed = false, slot = false, unreadable = false, fields = {} }
    for _, field in ipairs(pal.TRES_FIELDS) do
        local entries = pal.parse_tres(view[field])
        r.fields[field] = entries
        for _, e in ipairs(entries) do
            if e.gres and e.name == "gpu" then
                r.any = true
                if e.count == nil then
                    r.unreadable = true
                elseif e.count > r.total then
                    r.total = e.count
                end
                if e.type then
                    r.typed = true
                    if pal.is_slot_type(e.type) then
                        r.slot = true
                    end
                end
            end
        end
    end
    return r
end

--[[
Rewrite bare model types in one tres_per_* value.  `models` is a set of
lower-case model names.  Returns the new value (same string when nothing
changed) and the list of models removed from it, in order, without repeats.
--]]
function pal.rewrite_bare_types(value, models)
    local found, seen = {}, {}
    if type(value) ~= "string" or value == "" or models == nil then
        return value, found
    end
    local entries = pal.parse_tres(value)
    local changed = false
    for _, e in ipairs(entries) do
        if e.gres and e.name == "gpu" and e.type and e.count ~= nil then
            local model = e.type:lower()
            if models[model] then
                local count_text = e.raw:match("[:=]([^:=]*)$")
                if e.delim == nil then
                    count_text = nil           -- `gres:gpu:v100` -> `gres:gpu`
                end
                e.rewritten, e.type, e.count_text = true, nil, count_text
                changed = true
                if not seen[model] then
                    seen[model] = true
                    found[#found + 1] = model
                end
            end
        end
    end
    if not changed then
        return value, found
    end
    return pal.join_tres(entries), found
end

--- Add model features to an existing --constraint expression.
function pal.add_features(existing, models)
    if #models == 0 then
        return existing
    end
    -- A model already required by a plain AND expression is not added twice;
    -- inside an OR or a [..] group it does not count as required.
    local have = {}
    if type(existing) == "string" and not existing:find("[|%[%(]") then
        for token in existing:gmatch("[^&]+") do
            have[token] = true
        end
    end
    local add = {}
    for _, m in ipairs(models) do
        if not have[m] then
            add[#add + 1] = m
        end
    end
    if #add == 0 then
        return existing
    end
    local extra = table.concat(add, "&")
    if type(existing) ~= "string" or existing == "" then
        return extra
    end
    local base = existing
    if base:find("|", 1, true) and not base:match("^%[[^%[%]]*%]$") then
        base = "(" .. base .. ")"
    end
    return base .. "&" .. extra
end

-- ---------------------------------------------------------------- class hint

--[[
Normalise a class value: returns the class, or nil when invalid.  Trimmed byte by
byte, not with a pattern: a rule's class comes from the state file, and a lazy
pattern with a trailing `%s*$` is quadratic on a long run of spaces.
--]]
function pal.normalize_class(v)
    if type(v) ~= "string" then
        return nil
    end
    local first, last = 1, #v
    while first <= last and SPACE_BYTES[string.byte(v, first)] do
        first = first + 1
    end
    while last >= first and SPACE_BYTES[string.byte(v, last)] do
        last = last - 1
    end
    if last - first >= 8 then
        return nil
    end
    return VALID_CLASSES[string.upper(string.sub(v, first, last))]
end

--- Value of --pal-class from the job's spank_job_env (entries `NAME=value`).
function pal.spank_class_value(spank_env)
    if type(spank_env) ~= "table" then
        return nil
    end
    for _, entry in pairs(spank_env) do
        if type(entry) == "string" then
            local name, value = entry:match("^([^=]*)=(.*)$")
            if name == pal.SPANK_OPTION_VAR or name == "SPANK" .. pal.SPANK_OPTION_VAR then
                return value
            end
        end
    end
    return nil
end

local function rule_matches(rule, view)
    local keys = { user = "user_name", name = "name", account = "account", partition = "partition" }
    for rule_key, view_key in pairs(keys) do
        local want = rule[rule_key]
        if want ~= nil and want ~= view[view_key] then
            return false
        end
    end
    return true
end

--[[
The class hint of a job, first found: the --pal-class SPANK option, a
`pal:class=X` comment, the first matching rule, else auto.  Returns
class, src, warning (warning is a log text when the hint was invalid; the
class is then auto).
--]]
function pal.class_hint(view, rules)
    local raw, src
    local spank = pal.spank_class_value(view.spank_job_env)
    if spank ~= nil then
        raw, src = spank, "spank"
    elseif type(view.comment) == "string" and view.comment:lower():find("pal:class=", 1, true) then
        raw = view.comment:lower():match("pal:class=([^%s,;|]*)")
        src = "comment"
    elseif type(rules) == "table" then
        for i, rule in ipairs(rules) do
            if rule_matches(rule, view) then
                raw, src = rule.class, "rule:" .. tostring(rule.id or i)
                break
            end
        end
    end
    if src == nil then
        return "auto", "default", nil
    end
    local class = pal.normalize_class(raw)
    if class == nil then
        return "auto", src, "invalid class hint " .. pal.quote(raw) .. " from " .. src .. "; using auto"
    end
    return class, src, nil
end

-- ---------------------------------------------------------------- hold decision

--[[
Whether a job is eligible for holding, ignoring the mode; returns
ok, reason.  `gpus` is pal.find_gpu_requests(view) after the rewrite.
--]]
function pal.eligible(view, gpus, class)
    if class == "off" then
        return false, "class off"
    end
    if not gpus.any then
        return false, "no gpu request"
    end
    if gpus.unreadable then
        return false, "unreadable gpu request"
    end
    if gpus.total <= 0 then
        return false, "zero gpus"
    end
    if gpus.slot then
        return false, "slot type requested"
    end
    if gpus.typed then
        return false, "gpu type requested"
    end
    if is_set(view.req_nodes) then
        return false, "required nodes"
    end
    if is_set(view.array_inx) then
        return false, "job array"
    end
    if is_set(view.het_job_offset) then
        return false, "het job component"
    end
    if view.priority == 0 then
        return false, "already held"
    end
    if is_set(view.immediate) and view.immediate ~= 0 and view.immediate ~= pal.NO_VAL16 then
        return false, "immediate"
    end
    return true, "eligible"
end

--- Whether the daemon's heartbeat is fresh (a heartbeat from the far future counts as stale).
function pal.heartbeat_fresh(state, now)
    if type(state) ~= "table" or type(state.heartbeat) ~= "number" then
        return false
    end
    local age = now - state.heartbeat
    return age <= state.stale_after and -age <= state.stale_after
end

--[[
The hold decision: returns hold, reason.  Hold only in enforce mode, with a
fresh heartbeat, for an eligible job.
--]]
function pal.should_hold(view, gpus, class, state, now)
    if type(state) ~= "table" then
        return false, "no state"
    end
    local ok, reason = pal.eligible(view, gpus, class)
    if not ok then
        return false, reason
    end
    -- the user's own --begin in the future: that job waits anyway and is not ours to hold
    if type(view.begin_time) == "number" and view.begin_time > now and view.begin_time ~= pal.NO_VAL then
        return false, "own begin time"
    end
    if not pal.heartbeat_fresh(state, now) then
        return false, "stale heartbeat"
    end
    if state.mode ~= "enforce" then
        return false, "mode " .. tostring(state.mode)
    end
    -- a class whose GPUs all lie within the noise of each other: the placer would give
    -- its jobs Slurm's own first fit, so holding them would only add latency
    if type(state.unheld) == "table" and state.unheld[class] then
        return false, "class " .. tostring(class) .. " has nothing to choose"
    end
    return true, "enforce"
end

function pal.held_comment(class, src, existing)
    local tag = "pal:held class=" .. class .. " src=" .. src
    if type(existing) == "string" and existing ~= "" then
        return tag .. " | " .. existing
    end
    return tag
end

-- ---------------------------------------------------------------- state file

--[[
The filter state file is data, never code (format 2; the writer is
pal_slurm/slurm/filter_state.py, the contract docs/admin-guide.md, "The filter
state file").  A state file run as a Lua chunk, even in an empty environment
under an instruction hook, still reaches the string library through the string
metatable: one string.rep allocates most of a GiB inside slurmctld, one
backtracking gsub runs for minutes in a single C call no hook interrupts.  So
the file is read line by line with plain finds, every loop bounded by the
STATE_MAX_* limits, and the only pattern, the %XX decode, is linear.

    # comment
    format 2                   the first line that is not a comment or blank
    mode enforce               observe | enforce (anything else: observe)
    heartbeat 1765000000       integers: digits, an optional leading minus
    stale_after 30
    hold_s 600
    wake 1                     poke the wake-up file (its path is fixed: pal.wake_path)
    model v100                 one line per model, per unheld class, per rule
    unheld A
    rule id=3 user=alice name=train%20job class=B

One space after the key; rule fields `key=value` separated by single spaces;
values percent-encoded by the writer; a line may end in CR LF; unknown keys
and rule fields are skipped, so a newer placer may add some.
--]]

local RULE_KEYS = { user = true, name = true, account = true, partition = true, class = true, id = true }

-- "41" -> "A" for every spelling of two hex digits: string.gsub takes the table, no function call per escape
local HEX_PAIRS = {}
do
    local digits = "0123456789abcdefABCDEF"
    for i = 1, #digits do
        for j = 1, #digits do
            local pair = string.sub(digits, i, i) .. string.sub(digits, j, j)
            HEX_PAIRS[pair] = string.char(tonumber(pair, 16))
        end
    end
end

--- Decode %XX escapes (a `%` not followed by two hex digits stays as it is).
function pal.percent_decode(s)
    if not string.find(s, "%", 1, true) then
        return s
    end
    return (string.gsub(s, "%%(%x%x)", HEX_PAIRS))
end

--- The value of a plain integer (`-?[0-9]+`, at most 15 characters, so exact in a double), else nil.
local function plain_integer(s)
    local n = #s
    if n == 0 or n > 15 then
        return nil
    end
    local first = 1
    if string.byte(s, 1) == 45 then           -- "-"
        if n == 1 then
            return nil
        end
        first = 2
    end
    for i = first, n do
        local b = string.byte(s, i)
        if b < 48 or b > 57 then
            return nil
        end
    end
    return tonumber(s)
end

--- One rule's fields, `key=value` separated by single spaces; unknown keys skipped.
--- Returns the rule, or nil and an error text.
local function parse_rule(text)
    local rule, pos, n, fields = {}, 1, #text, 0
    while pos <= n do
        fields = fields + 1
        if fields > pal.STATE_MAX_RULE_FIELDS then
            return nil, "rule with more than " .. pal.STATE_MAX_RULE_FIELDS .. " fields"
        end
        local space = string.find(text, " ", pos, true)
        local last = space and space - 1 or n
        local field = string.sub(text, pos, last)
        local eq = string.find(field, "=", 1, true)
        if eq then
            local key = string.sub(field, 1, eq - 1)
            if RULE_KEYS[key] then
                rule[key] = pal.percent_decode(string.sub(field, eq + 1))
            end
        end
        pos = last + 2
    end
    return rule, nil
end

--- Apply one `key value` line to the state; returns an error text when the file must be refused.
local function apply_line(s, key, value, counts)
    if key == "mode" then
        local mode = pal.percent_decode(value)
        s.mode = (mode == "enforce" or mode == "observe") and mode or "observe"
    elseif key == "heartbeat" or key == "stale_after" or key == "hold_s" then
        local n = plain_integer(value)
        if n == nil then
            return key .. " is not an integer: " .. pal.quote(value)
        end
        if key == "heartbeat" then
            s.heartbeat = n
        elseif key == "stale_after" then
            s.stale_after = n >= 0 and n or pal.DEFAULT_STALE_AFTER
        else
            s.hold_s = (n >= 1 and n <= pal.MAX_HOLD_SECONDS) and n or pal.DEFAULT_HOLD_SECONDS
        end
    elseif key == "wake" then
        s.wake = value == "1"
    elseif key == "model" or key == "unheld" then
        counts[key] = counts[key] + 1
        if counts[key] > pal.STATE_MAX_MODELS then
            return "more than " .. pal.STATE_MAX_MODELS .. " " .. key .. " lines"
        end
        local v = pal.percent_decode(value)
        if v ~= "" then
            if key == "model" then
                s.models[string.lower(v)] = true
            else
                s.unheld[v] = true
            end
        end
    elseif key == "rule" then
        if #s.rules >= pal.STATE_MAX_RULES then
            return "more than " .. pal.STATE_MAX_RULES .. " rules"
        end
        local rule, err = parse_rule(value)
        if rule == nil then
            return err
        end
        s.rules[#s.rules + 1] = rule
    end
    return nil
end

--[[
Parse the text of a state file.  Returns state or nil, err; a file that breaks a
limit, says another format, or holds a number that is not a plain integer is
refused whole (the caller then holds nothing: fail open).
--]]
function pal.parse_state(text)
    if type(text) ~= "string" then
        return nil, "no state text"
    end
    local size = #text
    if size > pal.STATE_MAX_BYTES then
        return nil, "state file larger than " .. pal.STATE_MAX_BYTES .. " bytes"
    end
    local s = {
        format = 2, mode = "observe", stale_after = pal.DEFAULT_STALE_AFTER, hold_s = pal.DEFAULT_HOLD_SECONDS,
        wake = false, models = {}, unheld = {}, rules = {},
    }
    local counts = { model = 0, unheld = 0 }
    local pos, lineno, format_seen = 1, 0, false
    while pos <= size do
        local nl = string.find(text, "\n", pos, true)
        local last = nl and nl - 1 or size
        lineno = lineno + 1
        if lineno > pal.STATE_MAX_LINES then
            return nil, "state file has more than " .. pal.STATE_MAX_LINES .. " lines"
        end
        if last >= pos and string.byte(text, last) == 13 then   -- CR LF
            last = last - 1
        end
        if last - pos + 1 > pal.STATE_MAX_LINE then
            return nil, "state file line " .. lineno .. " is longer than " .. pal.STATE_MAX_LINE .. " bytes"
        end
        local line = string.sub(text, pos, last)
        pos = (nl or size) + 1
        if line ~= "" and string.byte(line, 1) ~= 35 then       -- not blank, not "#"
            local space = string.find(line, " ", 1, true)
            local key = space and string.sub(line, 1, space - 1) or line
            local value = space and string.sub(line, space + 1) or ""
            if not format_seen then
                if key ~= "format" or value ~= pal.STATE_FORMAT then
                    return nil, "unknown state format: the first line is " .. pal.quote(line) .. ", not `format "
                        .. pal.STATE_FORMAT .. "` (a state file of an older placer?)"
                end
                format_seen = true
            else
                local err = apply_line(s, key, value, counts)
                if err then
                    return nil, "state file line " .. lineno .. ": " .. err
                end
            end
        end
    end
    if not format_seen then
        return nil, "unknown state format: no `format " .. pal.STATE_FORMAT .. "` line"
    end
    return s, nil
end

--- Read and parse the state file (at most STATE_MAX_BYTES of it).  Returns state or nil, err.
function pal.load_state(path)
    local f, open_err = io.open(path, "rb")
    if not f then
        return nil, "cannot open " .. pal.quote(path) .. ": " .. tostring(open_err)
    end
    local text = f:read(pal.STATE_MAX_BYTES + 1) or ""
    f:close()
    return pal.parse_state(text)
end

--[[
The placer's wake-up file: WAKE_NAME in the state file's directory.  Computed
here, never read from the state file, so the file cannot point slurmctld at
another one; the directory is the placer's alone (it checks that at start and
otherwise says no `wake 1`).
--]]
function pal.wake_path(state_path)
    if type(state_path) ~= "string" or state_path == "" then
        return nil
    end
    local slash, from = nil, 1
    while true do
        local i = string.find(state_path, "/", from, true)
        if not i then
            break
        end
        slash, from = i, i + 1
    end
    if slash == nil then
        return pal.WAKE_NAME
    end
    return string.sub(state_path, 1, slash) .. pal.WAKE_NAME
end

local cache = { path = nil, at = nil, state = nil, err = nil }

--- The state, re-read at most every CACHE_SECONDS; a failure is cached as well.
function pal.get_state(path, now, log)
    if cache.path == path and cache.at ~= nil and now - cache.at < pal.CACHE_SECONDS and now >= cache.at then
        return cache.state, cache.err
    end
    local state, err = pal.load_state(path)
    cache.path, cache.at, cache.state, cache.err = path, now, state, err
    if err and log then
        log("pal: no usable filter state (" .. err .. "); holding nothing")
    end
    return state, err
end

function pal.reset_cache()
    cache = { path = nil, at = nil, state = nil, err = nil }
end

function pal.kill_switch_on(path)
    local f = io.open(path, "r")
    if f then
        f:close()
        return true
    end
    return false
end

-- ---------------------------------------------------------------- job handling

pal.VIEW_FIELDS = {
    "name", "user_name", "account", "partition", "comment", "admin_comment", "features",
    "req_nodes", "array_inx", "het_job_offset", "priority", "immediate", "spank_job_env", "begin_time",
    "tres_per_node", "tres_per_job", "tres_per_socket", "tres_per_task",
}

--- Copy the fields we use out of slurmctld's job_desc into a plain table.
function pal.read_view(job_desc)
    local view = {}
    for _, f in ipairs(pal.VIEW_FIELDS) do
        view[f] = job_desc[f]
    end
    return view
end

--[[
Decide what to change, without touching the job.  Returns changes (field ->
new value) and a list of log lines.  Pure: state and now are passed in.
--]]
function pal.plan(view, state, now)
    local changes, logs = {}, {}
    local models = type(state) == "table" and state.models or nil
    local removed, seen = {}, {}
    local after = {}
    for _, field in ipairs(pal.TRES_FIELDS) do
        local value, found = pal.rewrite_bare_types(view[field], models)
        after[field] = value
        if value ~= view[field] then
            changes[field] = value
        end
        for _, m in ipairs(found) do
            if not seen[m] then
                seen[m] = true
                removed[#removed + 1] = m
            end
        end
    end
    if #removed > 0 then
        local features = pal.add_features(view.features, removed)
        if features ~= view.features then
            changes.features = features
        end
        logs[#logs + 1] = "pal: job " .. pal.quote(view.name) .. " bare gpu type rewritten, features="
            .. pal.quote(features)
    end

    local rules = type(state) == "table" and state.rules or nil
    local class, src, warning = pal.class_hint(view, rules)
    if warning then
        logs[#logs + 1] = "pal: job " .. pal.quote(view.name) .. " " .. warning
    end
    local post = {}
    for k, v in pairs(view) do
        post[k] = v
    end
    for k, v in pairs(after) do
        post[k] = v
    end
    local gpus = pal.find_gpu_requests(post)
    local hold, reason = pal.should_hold(post, gpus, class, state, now)
    if hold then
        local until_time = math.floor(now) + (state.hold_s or pal.DEFAULT_HOLD_SECONDS)
        -- the begin time, not priority 0: see the header
        changes.admin_comment = pal.held_comment(class, src, view.admin_comment)
        changes.begin_time = until_time
        logs[#logs + 1] = "pal: held job " .. pal.quote(view.name) .. " class=" .. class .. " src=" .. src
    elseif type(state) == "table" and state.mode == "observe" and reason == "mode observe" then
        logs[#logs + 1] = "pal: observe job " .. pal.quote(view.name) .. " would hold class=" .. class
    end
    return changes, logs, reason
end

local APPLY_ORDER = {
    "tres_per_node", "tres_per_job", "tres_per_socket", "tres_per_task", "features",
    "admin_comment", "begin_time",
}

--[[
Write the planned changes to job_desc.  If any assignment fails, put back the
values written so far (nil strings as "", which Slurm stores as unset) and
re-raise, so the job stays as submitted.
--]]
function pal.apply(job_desc, changes, view)
    local done = {}
    local ok, err = pcall(function()
        for _, field in ipairs(APPLY_ORDER) do
            if changes[field] ~= nil then
                job_desc[field] = changes[field]
                done[#done + 1] = field
            end
        end
    end)
    if not ok then
        for _, field in ipairs(done) do
            local old = view[field]
            if old == nil then
                old = (field == "begin_time") and 0 or ""
            end
            pcall(function()
                job_desc[field] = old
            end)
        end
        error(err, 0)
    end
end

--[[
Wake the placer at once: append one byte to its wake-up file.  A regular file
on a local disk cannot block slurmctld, and a missing one (or a directory we
may not write) only makes io.open return nil.  io.open cannot refuse a FIFO
(which would block here) or a link, so the placer says `wake 1` only after it
made the file and found it a regular file in a directory only it may write.
Never raises.  Returns true when the byte was written.
--]]
function pal.poke(path)
    if type(path) ~= "string" or path == "" then
        return false
    end
    local ok, written = pcall(function()
        local f = io.open(path, "a")
        if not f then
            return false
        end
        local w = f:write("1")
        f:close()
        return w ~= nil
    end)
    return ok and written == true
end

local function env_path(name, default)
    local v = os.getenv(name)
    if v == nil or v == "" then
        return default
    end
    return v
end

--- The whole submit path; may raise (the Slurm callback catches it).
function pal.process(job_desc, now, log)
    if pal.kill_switch_on(env_path("PAL_FILTER_KILL_SWITCH", pal.DEFAULT_KILL_SWITCH)) then
        return nil
    end
    local state_path = env_path("PAL_FILTER_STATE", pal.DEFAULT_STATE_PATH)
    local state = pal.get_state(state_path, now, log)
    local view = pal.read_view(job_desc)
    local changes, logs = pal.plan(view, state, now)
    pal.apply(job_desc, changes, view)
    if changes.begin_time ~= nil and type(state) == "table" and state.wake then
        pal.poke(pal.wake_path(state_path))   -- held: the placer places it now, not at its next cycle
    end
    for _, line in ipairs(logs) do
        log(line)
    end
    return changes
end

-- ---------------------------------------------------------------- Slurm callbacks

local function log_info(msg)
    if slurm and slurm.log_info then
        pcall(slurm.log_info, "%s", msg)
    end
end

local function log_error(msg)
    if slurm and slurm.log_error then
        pcall(slurm.log_error, "%s", msg)
    elseif slurm and slurm.error then
        pcall(slurm.error, "%s", msg)
    end
end

function slurm_job_submit(job_desc, part_list, submit_uid)
    local ok, err = pcall(pal.process, job_desc, os.time(), log_info)
    if not ok then
        log_error("pal: filter error, job left as submitted: " .. tostring(err))
    end
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    -- The placer retypes held jobs with scontrol update; the filter stays out of the way.
    return slurm.SUCCESS
end

if PAL_FILTER_TEST then
    return pal
end

return slurm.SUCCESS
