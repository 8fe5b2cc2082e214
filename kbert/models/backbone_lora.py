"""LoRA (Hu et al. 2021) on a backbone's encoder: `enable_lora`, and the
adapters saved and loaded alone (`kbert.presets.lora`)."""

import keras

from kbert.presets import lora


class LoRA:
    """`BertBackbone`'s LoRA methods (a backbone sets `lora_rank` and
    `lora_layer_names` to None and () when built)."""

    def enable_lora(self, rank, target_layer_names=("query", "value")):
        """LoRA (Hu et al. 2021), as KerasHub's `Backbone.enable_lora`: each
        dense layer named in `target_layer_names` (the attention's `query`
        and `value` by default; also `key`, `attention_output`,
        `intermediate`, `output`) learns a rank-`rank` update `A @ B` of its
        frozen kernel, and every other weight of the backbone is frozen, so
        that only the adapters (and a task's head) train. The layers apply
        the kernel with the update merged, so `predict`, `export`,
        `save_to_preset`, `export_to_transformers` and `.keras` files give
        the merged model (as KerasHub's, a reloaded model has LoRA off:
        enable it again to train new adapters on the merged kernels).
        `save_lora_weights` / `load_lora_weights` keep the adapters alone,
        to load on the base weights they were trained on.

        Example:
        >>> model = kbert.BertClassifier.from_preset("base", num_classes=2)
        >>> model.backbone.enable_lora(4)
        >>> model.fit(texts, labels)
        >>> model.backbone.save_lora_weights("sentiment.lora.safetensors")
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
        for variable in self.weights:
            if "lora_kernel" not in variable.path:
                variable.trainable = False
        self.lora_rank, self.lora_layer_names = rank, names

    def lora_weights(self):
        """The LoRA adapters by path (`enable_lora`), e.g.
        `transformer_layer_0/query/lora_kernel_a`."""
        return {v.path: v for v in self.weights if "lora_kernel" in v.path}

    def save_lora_weights(self, path):
        """Writes the LoRA adapters alone (a few hundred kB, not the model)
        to a safetensors file."""
        if self.lora_rank is None:
            raise ValueError("This backbone has no LoRA adapters to save: call enable_lora(rank) and train first.")
        lora.write_adapters(path, {k: keras.ops.convert_to_numpy(v) for k, v in self.lora_weights().items()},
                            self.lora_rank, self.lora_layer_names)

    def load_lora_weights(self, path):
        """Reads adapters written by `save_lora_weights` into this backbone
        (enabling LoRA with their rank and layers if it is off)."""
        rank, names, tensors = lora.read_adapters(path)
        if self.lora_rank is None:
            self.enable_lora(rank, names)
        if (self.lora_rank, self.lora_layer_names) != (rank, names):
            raise ValueError(f"{path} holds rank-{rank} adapters of {list(names)}; this backbone has rank "
                             f"{self.lora_rank} on {list(self.lora_layer_names)}.")
        variables = self.lora_weights()
        if set(tensors) != set(variables):
            raise ValueError(f"{path} holds adapters for {len(tensors)} weights, this backbone {len(variables)}: "
                             f"missing {sorted(set(variables) - set(tensors))[:3]}, unexpected "
                             f"{sorted(set(tensors) - set(variables))[:3]}.")
        for name, variable in variables.items():
            if tuple(tensors[name].shape) != tuple(variable.shape):
                raise ValueError(f"{path}: {name} has shape {tensors[name].shape}, this backbone {variable.shape}.")
            variable.assign(tensors[name])
