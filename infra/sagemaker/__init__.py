"""SageMaker training jobs: the image's entrypoint boots Ray on the job's hosts; the launcher
starts a job. Nothing outside `infra/` knows about SageMaker."""
