"""Which weights of a task model `fit` trains: Keras' trainable weights, less
the backbone's pooler where the task's outputs do not read it (the token
classifier's and the question answerer's, as in transformers'
`BertForTokenClassification` and `BertForQuestionAnswering`, which have
none). Left out, it gets no gradient to warn about and no optimizer state,
and counts as non-trainable; it is still saved, loaded and exported with the
backbone."""


class TrainedWeights:
    """`Task`'s trainable and non-trainable weights (a mixin before
    `keras.Model`)."""

    reads_pooler = True  # whether the task's outputs read the backbone's pooler

    def _unread(self):
        return set() if self.reads_pooler else {id(v) for v in self.backbone.pooled_dense.weights}

    @property
    def trainable_weights(self):
        unread = self._unread()
        return [v for v in super().trainable_weights if id(v) not in unread]

    trainable_variables = trainable_weights

    @property
    def non_trainable_weights(self):
        unread = self._unread()
        return super().non_trainable_weights + [v for v in super().trainable_weights if id(v) in unread]

    @property
    def non_trainable_variables(self):
        unread = self._unread()
        return super().non_trainable_variables + [v for v in super().trainable_weights if id(v) in unread]
