"""metagen.tasks: benchmark loaders, answer extraction, equivalence and graders.

- :mod:`metagen.tasks.gsm8k` — GSM8K (last ``#### N``, numbers compared),
  :data:`GSM8K_ANSWER_KEY`.
- :mod:`metagen.tasks.math500` — MATH-500 (last ``\\boxed{}``, math-verify equivalence: optional
  extra ``math``), :data:`MATH_ANSWER_KEY`.
- :mod:`metagen.tasks.answer_key` — :class:`AnswerKey`, what voting and MBR take as
  ``answer_key=`` instead of the GSM8K default extractor.
"""
