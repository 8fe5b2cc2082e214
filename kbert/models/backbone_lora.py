"""LoRA (Hu et al. 2021) on a backbone's encoder: `enable_lora`; LoRA files
(`kbert.presets.lora`) of the adapters alone (the backbone's
`save_lora_weights`) or of everything a task trained with them (the task's,
`task_training.py`); and the record of the adapters merged into a saved
backbone's kernels, so that they are not applied twice."""

import keras

from kbert.models.arguments import check_keras_model_arguments
from kbert.presets import lora


class LoRA:
    """`BertBackbone`'s LoRA methods and state: `lora_rank` and
    `lora_layer_names` (None and () until `enable_lora`), and `lora_merged`,
    the fingerprints (`lora.fingerprint`) of the adapters merged into the
    kernels it was built with, which its config keeps (`lora_config`)."""

    def __init__(self, *args, lora_merged=(), **kwargs):
        check_keras_model_arguments(type(self), kwargs)
        super().__init__(*args, **kwargs)
        self.lora_merged = tuple(lora_merged)

    def enable_lora(self, rank, target_layer_names=("query", "value")):
        """LoRA (Hu et al. 2021), as KerasHub's `Backbone.enable_lora`: each
        dense layer named in `target_layer_names` (the attention's `query`
        and `value` by default; also `key`, `attention_output`,
        `intermediate`, `output`) learns a rank-`rank` update `A @ B` of its
        frozen kernel, and every other weight of the backbone is frozen, so
        that only the adapters (and a task's head) train, from the next
        `fit` on, whatever trained before. The layers apply the kernel with
        the update merged, so `predict`, `export`, `save_to_preset`,
        `export_to_transformers` and `.keras` files give the merged model
        (as KerasHub's, a reloaded model has LoRA off: enable it again to
        train new adapters on the merged kernels; its config records the
        merge, and `load_lora_weights` refuses to apply the same adapters
        again). A task's `save_lora_weights` / `load_lora_weights` keep what
        trained (the adapters and the head), to load on the base weights
        they were trained on; the backbone's, the adapters alone.

        Example:
        >>> model = kbert.BertClassifier.from_preset("base", num_classes=2)
        >>> model.backbone.enable_lora(4)
        >>> model.fit(texts, labels)
        >>> model.save_lora_weights("sentiment.lora.safetensors")
        >>> other = kbert.BertClassifier.from_preset("base", num_classes=2)
        >>> other.load_lora_weights("sentiment.lora.safetensors")  # the trained model again
        """
        if self.lora_rank is not None:
            raise ValueError(f"LoRA is enabled already (rank {self.lora_rank}); enable it once per backbone.")
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
            raise ValueError(f"rank={rank!r}: the rank of the LoRA update, a positive int such as 4 or 8.")
        names = tuple(target_layer_names)
        known = {layer.name for block in self.transformer_layers for layer in block.dense_layers()}
        if not names or set(names) - known:
            raise ValueError(f"target_layer_names={list(names)}: name the encoder's dense layers to adapt, among "
                             f"{sorted(known)}.")
        for block in self.transformer_layers:
            for layer in block.dense_layers():
                if layer.name in names:
                    layer.enable_lora(rank)
        # Frozen by Keras' own flags, as Keras' Dense.enable_lora freezes its kernel, not by TrainedWeights'
        # list alone: PyTorch reads the flags (requires_grad) and would compute every frozen weight's gradient.
        for variable in self.weights:
            if not lora.is_adapter(variable.path):
                variable.trainable = False
        self.lora_rank, self.lora_layer_names = rank, names

    def lora_weights(self):
        """The LoRA adapters by path (`enable_lora`), e.g.
        `transformer_layer_0/query/lora_kernel_a`."""
        return {v.path: v for v in self.weights if lora.is_adapter(v.path)}

    def lora_config(self):
        """What the backbone's config keeps of LoRA: the adapters merged into
        its kernels as saved, those it was built with and, with LoRA on, its
        own (every way of saving it writes the merged kernels)."""
        merged = self.lora_merged
        if self.lora_rank is not None:
            merged += (lora.fingerprint(_values(self.lora_weights().values())),)
        return {"lora_merged": list(merged)} if merged else {}

    def save_lora_weights(self, path):
        """Writes the LoRA adapters alone (a few hundred kB, not the model)
        to a safetensors file. A task's head is not in it: a task's
        `save_lora_weights` saves the adapters and the head."""
        save_trained(self, [], path)

    def load_lora_weights(self, path):
        """Reads adapters written by `save_lora_weights` into this backbone
        (enabling LoRA with their rank and layers if it is off). A file of a
        task's `save_lora_weights`, which also holds its head, is refused:
        load it with the task's `load_lora_weights`."""
        load_trained(self, path, self.weights, ())


def save_trained(backbone, trained, path):
    """Writes `backbone`'s adapters and the other variables of `trained` (a
    task's head) to the LoRA file `path`."""
    if backbone.lora_rank is None:
        raise ValueError("This backbone has no LoRA adapters to save: call enable_lora(rank) and train first.")
    tensors = _values(backbone.lora_weights().values())
    for variable in trained:
        if not lora.is_adapter(variable.path):
            if variable.path in tensors:
                raise ValueError(f"Two trained weights share the path {variable.path}: name the layers apart.")
            tensors[variable.path] = keras.ops.convert_to_numpy(variable)
    lora.write(path, tensors, backbone.lora_rank, backbone.lora_layer_names, backbone.lora_merged)


def load_trained(backbone, path, weights, required):
    """Reads the LoRA file `path`: its adapters into `backbone` (enabling
    LoRA if it is off), its other tensors into the variables of `weights`
    of the same paths, refused unless it holds one for each of `required`
    (a task's head). Everything is checked before anything is changed,
    except the adapters' paths, which exist once LoRA is on."""
    read = lora.read(path)
    _check_trained_on(backbone, read, path)
    variables = {v.path: v for v in weights if not lora.is_adapter(v.path)}
    missing = sorted({v.path for v in required} - set(read.others))
    if missing and not read.others:
        raise ValueError(f"{path} holds LoRA adapters alone (as the backbone's save_lora_weights writes them), "
                         f"not the weights this model trains with them ({', '.join(missing[:3])}): the head would "
                         "stay as it is. Load the adapters alone with model.backbone.load_lora_weights(path), or "
                         "save the adapters and the head with the trained model's save_lora_weights.")
    unknown = sorted(set(read.others) - set(variables))
    if unknown and not required:
        raise ValueError(f"{path} also holds weights this backbone does not have ({', '.join(unknown[:3])}): a "
                         "task's head, saved with the adapters by the task's save_lora_weights. Load it with that "
                         "task's load_lora_weights (model.load_lora_weights(path)).")
    if missing or unknown:
        raise ValueError(f"{path} does not hold the weights this model trains besides its adapters: missing "
                         f"{missing[:3]}, unexpected {unknown[:3]}. Load it into a model like the one that saved it.")
    _check_shapes(path, read.others, variables)
    if backbone.lora_rank is None:
        backbone.enable_lora(read.rank, read.layer_names)
    if (backbone.lora_rank, backbone.lora_layer_names) != (read.rank, read.layer_names):
        raise ValueError(f"{path} holds rank-{read.rank} adapters of {list(read.layer_names)}; this backbone has "
                         f"rank {backbone.lora_rank} on {list(backbone.lora_layer_names)}.")
    adapters = backbone.lora_weights()
    if set(read.adapters) != set(adapters):
        raise ValueError(f"{path} holds adapters for {len(read.adapters)} weights, this backbone {len(adapters)}: "
                         f"missing {sorted(set(adapters) - set(read.adapters))[:3]}, unexpected "
                         f"{sorted(set(read.adapters) - set(adapters))[:3]}.")
    _check_shapes(path, read.adapters, adapters)
    for name, value in {**read.adapters, **read.others}.items():
        (adapters[name] if name in adapters else variables[name]).assign(value)


def _check_trained_on(backbone, read, path):
    """Refuses adapters merged into `backbone`'s kernels already, or
    trained on kernels holding other merged adapters than it does."""
    adapters = lora.fingerprint(read.adapters)
    if adapters in backbone.lora_merged:
        raise ValueError(f"{path}: these adapters ({adapters}) are merged into this backbone's kernels already "
                         "(it was saved from a model with them on), so loading them would apply their update a "
                         "second time. Use this model as it is, or load the adapters on the base model they were "
                         "trained on.")
    if read.trained_on is not None and read.trained_on != backbone.lora_merged:
        raise ValueError(f"{path} holds adapters trained on kernels with the adapters {list(read.trained_on)} "
                         f"merged in; this backbone's kernels have {list(backbone.lora_merged)}. Load them on the "
                         "model they were trained on.")


def _check_shapes(path, tensors, variables):
    for name, value in tensors.items():
        if tuple(value.shape) != tuple(variables[name].shape):
            raise ValueError(f"{path}: {name} has shape {value.shape}, this model {variables[name].shape}.")


def _values(variables):
    return {v.path: keras.ops.convert_to_numpy(v) for v in variables}
