"""The keyword arguments a kbert model passes on to `keras.Model`.

Keras' functional `Model.__init__` drops keyword arguments it does not know,
so a misspelt argument (`nmu_classes=3`) would build a model without it and
say nothing. kbert's backbones and tasks pass on only these."""

import difflib
import inspect

# What a functional model's config holds beside the class's own arguments.
KERAS_MODEL_ARGUMENTS = ("name", "trainable")


def check_keras_model_arguments(cls, kwargs):
    """Raises a TypeError naming each argument of `kwargs` that `cls` does not
    take, with the closest argument it does take."""
    unknown = sorted(set(kwargs) - set(KERAS_MODEL_ARGUMENTS) - {"inputs", "outputs"})
    if not unknown:
        return
    known = sorted({name for klass in cls.__mro__ if "__init__" in vars(klass) and klass.__module__.startswith("kbert.")
                    for name, parameter in inspect.signature(klass.__init__).parameters.items()
                    if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
                    and name not in ("self", "inputs", "outputs")} | set(KERAS_MODEL_ARGUMENTS))
    guesses = [f'"{name}" (did you mean "{close[0]}"?)' if (close := difflib.get_close_matches(name, known, 1))
               else f'"{name}"' for name in unknown]
    raise TypeError(f"{cls.__name__} got unexpected keyword arguments: {', '.join(guesses)}. "
                    f"It takes: {', '.join(known)}.")
