"""The run directory, a contract several commands share: `grpo train` writes it; `grpo eval run/compare`,
`report`, `export` and the model card read it. Its file names, whole checkpoints and resume rules, the model card,
the report and the export live here, so that train/ and eval/ stand side by side and neither imports the other."""
