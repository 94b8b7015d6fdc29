"""Integrations of kittens with other libraries, each an optional extra: :mod:`kittens.integrations.transformers`
(Hugging Face models; ``pip install ./python[hf]``)."""
