"""What a deployment gives a TaskManager for flink-gpu: the Kubernetes and YARN resource requests, and the
environment a TaskManager starts with."""
