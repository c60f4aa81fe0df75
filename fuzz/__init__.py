"""Coverage-guided fuzzing (atheris) of habroker's frame parsers; see docs/fuzzing.md."""
