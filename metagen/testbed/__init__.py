"""metagen.testbed: a verifiable world of arithmetic word problems and small models trained on it.

The problem generator (seeded, disjoint splits, several solution paths per problem), the GSM8K
style grader, and the four committed models (policy, draft, ORM, PRM) as Hugging Face folders.
See ``metagen/testbed/README.md`` (the data card). Importing this package does not import torch.
"""

from metagen.testbed.modeling import model_path
from metagen.testbed.problems import (Problem, format_prompt, grade, iter_problems, make_problems,
                                      split_of)

__all__ = ["Problem", "format_prompt", "grade", "iter_problems", "make_problems", "model_path",
           "split_of"]
