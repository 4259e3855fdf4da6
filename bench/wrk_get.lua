-- GET /v1/entries/{i} for random committed indices in [0, WRK_MAX_INDEX].
dofile(os.getenv("WRK_REPORT"))
local max_index = tonumber(os.getenv("WRK_MAX_INDEX"))
request = function()
  return wrk.format("GET", "/v1/entries/" .. math.random(0, max_index))
end
