"""The pipeline's one error."""


class PipelineError(ValueError):
    """Input the pipeline cannot read: a file of the wrong format, a missing column."""
