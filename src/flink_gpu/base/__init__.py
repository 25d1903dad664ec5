"""What every other concept stands on: THE order of GPU indices, the one rule for reading a file a user
names, and lazily loaded package attributes. Nothing here imports another concept of flink_gpu."""
