// Package examples holds the README's worked example: an inference
// Deployment and a batch inference Job placed through Slurm, and the
// training job that shares their GPUs. Its test keeps the manifests valid.
package examples
