-- End a producer's transaction on one partition: its COMMIT or ABORT marker (marker.lua
-- has the keys, the arguments and the reply).
return write_marker(KEYS, ARGV)
