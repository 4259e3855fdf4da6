-- Shared by the wrk scripts: a bearer token from WRK_TOKEN on every request, if given, and one
-- JSON line the benchmark parses.
local token = os.getenv("WRK_TOKEN")
if token then
  wrk.headers["Authorization"] = "Bearer " .. token
end

function done(summary, latency, requests)
  local errors = summary.errors.connect + summary.errors.read + summary.errors.write
      + summary.errors.status + summary.errors.timeout
  io.write(string.format(
    'WRK_JSON {"requests": %d, "duration_us": %d, "errors": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, '
    .. '"p999_us": %d}\n',
    summary.requests, summary.duration, errors, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency:percentile(99.9)))
end

-- n as `width` base64 digits: when width is a multiple of 4, the base64 text of width * 3/4 bytes,
-- so etcd's JSON gateway gets a distinct key per n without encoding anything per request
local alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
function base64_number(n, width)
  local digits = {}
  for i = width, 1, -1 do
    local d = n % 64
    digits[i] = alphabet:sub(d + 1, d + 1)
    n = (n - d) / 64
  end
  return table.concat(digits)
end
