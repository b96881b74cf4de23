"""The Slurm adapter: squeue/sinfo/scontrol/sbatch behind the adapter interface."""
