// The Lua scripts of the Redis tier.
//
// A record is a hash: version, stored_at_us (Redis time), fresh_us, keep_us,
// serve_on_error_us, load_us, and either value or error_code plus
// error_message. The lease is a string holding the holder's token, with a
// PX expiry. Durations are decimal microseconds.

#include "redis/scripts.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace paddock::internal {
namespace {

// Writes the record described by ARGV[i..i+8] (protocol.h, RecordArgs) at
// KEYS[1], stamped with Redis's clock. KEYS[1] must have been deleted.
constexpr const char* kStoreFunction = R"lua(
local function store(i)
  local expire_ms = ARGV[i + 5]
  if expire_ms == '0' then return end
  local clock = redis.call('TIME')
  local stored_at = clock[1] .. string.format('%06d', tonumber(clock[2]))
  local fields = {'version', ARGV[i], 'stored_at_us', stored_at,
                  'fresh_us', ARGV[i + 1], 'keep_us', ARGV[i + 2],
                  'serve_on_error_us', ARGV[i + 3], 'load_us', ARGV[i + 4]}
  if ARGV[i + 6] == 'value' then
    fields[#fields + 1] = 'value'
    fields[#fields + 1] = ARGV[i + 7]
  else
    fields[#fields + 1] = 'error_message'
    fields[#fields + 1] = ARGV[i + 7]
    fields[#fields + 1] = 'error_code'
    fields[#fields + 1] = ARGV[i + 8]
  end
  redis.call('HSET', KEYS[1], unpack(fields))
  if expire_ms ~= '' then redis.call('PEXPIRE', KEYS[1], expire_ms) end
end
)lua";

constexpr const char* kLookupSource = R"lua(
-- A decimal field of at most 16 digits, or nil.
local function digits(s)
  if type(s) == 'string' and #s > 0 and #s <= 16 and not string.find(s, '%D')
  then
    return tonumber(s)
  end
  return nil
end

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

-- The record, if it is readable and younger than its keep_for. Its payload
-- (the value or the error message) is read only once HSTRLEN says it fits
-- max_value_bytes (ARGV[4]): another process, with a larger limit, may have
-- written one of up to 512 MB, which this asker could not use.
local record, bad, serve, oversized = nil, 0, false, nil
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'hash' then
  local f = redis.call('HMGET', KEYS[1], 'version', 'stored_at_us',
                       'fresh_us', 'keep_us', 'serve_on_error_us', 'load_us',
                       'error_code')
  local has_value = redis.call('HEXISTS', KEYS[1], 'value') == 1
  local has_message = redis.call('HEXISTS', KEYS[1], 'error_message') == 1
  local stored_at, fresh, keep = digits(f[2]), digits(f[3]), digits(f[4])
  local code = digits(f[7])
  local is_value = has_value and not f[7] and not has_message
  local is_error = not has_value and code ~= nil and code >= 1 and code <= 16 and
                   has_message
  if type(f[1]) == 'string' and #f[1] > 0 and stored_at and fresh and keep and
     digits(f[5]) and digits(f[6]) and (is_value or is_error) then
    local age = now - stored_at
    if age < 0 then age = 0 end
    if age < keep then
      local max_bytes = tonumber(ARGV[4])
      if is_value then
        local size = redis.call('HSTRLEN', KEYS[1], 'value')
        if size > max_bytes then
          oversized = size
        else
          record = {f[1], age, f[3], f[4], f[5], f[6],
                    redis.call('HGET', KEYS[1], 'value'), false, false}
          -- Served while fresh, unless the asker already has this version.
          serve = age < fresh and f[1] ~= ARGV[1]
        end
      else
        -- A remembered error is served while kept; an overlong message
        -- (the code is what counts) is replaced by a short one.
        local size = redis.call('HSTRLEN', KEYS[1], 'error_message')
        local message
        if size > max_bytes then
          message = 'paddock: a remembered error whose message of ' .. size ..
                    ' bytes is over max_value_bytes (not read)'
        else
          message = redis.call('HGET', KEYS[1], 'error_message')
        end
        record = {f[1], age, f[3], f[4], f[5], f[6], false, f[7], message}
        serve = true
      end
    end
  else
    bad = 1
  end
elseif kind ~= 'none' then
  bad = 1
end

-- A value too large for this asker: no lease (it could not fill over it),
-- no record, only its size.
if oversized then return {0, 0, '', 2, oversized} end

local lease, remaining, holder = 0, 0, ''
if not serve then
  if redis.call('SET', KEYS[2], ARGV[2], 'NX', 'PX', ARGV[3]) then
    lease = 1
  else
    lease = 2
    remaining = redis.call('PTTL', KEYS[2])
    if remaining < 0 then
      -- A lease without expiry (written by hand) must not block the key.
      redis.call('PEXPIRE', KEYS[2], ARGV[3])
      remaining = tonumber(ARGV[3])
    end
    local token = redis.pcall('GET', KEYS[2])
    if type(token) == 'string' then holder = token end
  end
end

local reply = {lease, remaining, holder, bad}
if record then
  for i = 1, 9 do reply[4 + i] = record[i] end
end
return reply
)lua";

constexpr const char* kFillBody = R"lua(
if redis.pcall('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
store(4)
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1
)lua";

constexpr const char* kReleaseSource = R"lua(
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1
)lua";

constexpr const char* kExtendSource = R"lua(
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
)lua";

constexpr const char* kPutBody = R"lua(
redis.call('DEL', KEYS[1], KEYS[2])
store(3)
redis.call('PUBLISH', ARGV[1], ARGV[2])
return 1
)lua";

constexpr const char* kInvalidateSource = R"lua(
local deleted = redis.call('DEL', KEYS[1], KEYS[2])
redis.call('PUBLISH', ARGV[1], ARGV[2])
return deleted
)lua";

// Every command, with the arguments that decide its key or channel, that the
// scripts above, AwaitChange's poll (GET) and the change subscription
// (SUBSCRIBE, PING) send. docs/fleet.md lists the ACL they make.
constexpr const char* kAclProbeSource = R"lua(
if not redis.acl_check_cmd then return -1 end
local record, lease, channel = KEYS[1], KEYS[2], ARGV[1]
local needed = {
  {'TIME'}, {'TYPE', record}, {'HMGET', record, 'version'},
  {'HEXISTS', record, 'value'}, {'HSTRLEN', record, 'value'},
  {'HGET', record, 'value'}, {'HSET', record, 'version', '1'},
  {'PEXPIRE', record, '1'}, {'DEL', record, lease},
  {'SET', lease, '1', 'NX', 'PX', '1'}, {'PTTL', lease}, {'GET', lease},
  {'PEXPIRE', lease, '1'}, {'PUBLISH', channel, '1'},
  {'SUBSCRIBE', channel}, {'PING'},
}
local refused = {}
for _, command in ipairs(needed) do
  if not redis.acl_check_cmd(unpack(command)) then
    refused[#refused + 1] = command[1]
  end
end
return refused
)lua";

}  // namespace

const std::string& ScriptSource(Script script) {
  static const std::string* const sources = [] {
    auto* s = new std::string[kScriptCount];
    s[static_cast<int>(Script::kLookup)] = kLookupSource;
    s[static_cast<int>(Script::kFill)] =
        absl::StrCat(kStoreFunction, kFillBody);
    s[static_cast<int>(Script::kRelease)] = kReleaseSource;
    s[static_cast<int>(Script::kExtend)] = kExtendSource;
    s[static_cast<int>(Script::kPut)] = absl::StrCat(kStoreFunction, kPutBody);
    s[static_cast<int>(Script::kInvalidate)] = kInvalidateSource;
    s[static_cast<int>(Script::kAclProbe)] = kAclProbeSource;
    return s;
  }();
  return sources[static_cast<int>(script)];
}

const char* ScriptName(Script script) {
  switch (script) {
    case Script::kLookup:
      return "lookup";
    case Script::kFill:
      return "fill";
    case Script::kRelease:
      return "release";
    case Script::kExtend:
      return "extend";
    case Script::kPut:
      return "put";
    case Script::kInvalidate:
      return "invalidate";
    case Script::kAclProbe:
      return "ACL probe";
  }
  return "?";
}

}  // namespace paddock::internal
