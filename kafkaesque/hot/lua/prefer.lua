-- A partition's preferred leader (a replica assignment, kafkaesque/partition/replicas.py), which
-- kafkaesque.partition.leadership gives the partition while that broker lives. KEYS[1] meta hash;
-- ARGV[1] the node id. Returns 1, or 0 for a partition that does not exist.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'preferred', ARGV[1])
return 1
