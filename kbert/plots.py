"""Pictures of what a model does: attention maps, training curves, confusion
matrices.

Each function draws on its own `matplotlib.figure.Figure` with the Agg
canvas, without pyplot: nothing changes matplotlib's global backend, figures
are not kept alive by pyplot, and the functions work on machines without a
display. A notebook shows the returned Figure inline (after
`%matplotlib inline`); `path=` also writes it as a PNG.
"""

import keras
import numpy as np


def _figure(width, height):
    # matplotlib loads here, when a plot is drawn, not with kbert: a runtime
    # may lack it (Colab's TPU runtime after the README's --no-deps install),
    # and nothing else in kbert needs it.
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ModuleNotFoundError as e:
        if (e.name or "").partition(".")[0] != "matplotlib":
            raise
        raise ModuleNotFoundError("kbert's plots draw with matplotlib, which is not installed: "
                                  "`pip install matplotlib`.", name="matplotlib") from None
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _numpy(x):
    # Backend tensors through Keras; anything else (lists, numpy, the
    # tf.data side's tensors under another backend) through numpy.
    return keras.ops.convert_to_numpy(x) if keras.ops.is_tensor(x) else np.asarray(x)


def _save(figure, path):
    if path is not None:
        figure.savefig(path, format="png", dpi=100)
    return figure


def plot_attention(model, text, layer, head, path=None, preprocessor=None):
    """Heat map of one attention head on one text: row `i` is how much token
    `i` attends to each token (its softmax probabilities, so rows sum to 1).

    Only the text's real tokens are shown, `[CLS]` to `[SEP]`, no padding.

    Args:
        model: a kbert task model (it has `.backbone` and `.preprocessor`),
            or a `kbert.BertBackbone` together with `preprocessor=`.
        text: one string.
        layer: the encoder block, `0` to `num_layers - 1` (negative counts
            from the last).
        head: the attention head, `0` to `num_heads - 1` (negative counts
            from the last).
        path: where to write the PNG, if anywhere.
        preprocessor: a `kbert.BertPreprocessor`, needed with a bare backbone;
            for a task model it replaces the model's own.

    Returns:
        The `matplotlib.figure.Figure`.

    Example:
    >>> model = kbert.BertClassifier.from_preset("base", num_classes=2)
    >>> kbert.plot_attention(model, "The cat sat on the mat.", layer=-1, head=0, path="attention.png")
    """
    backbone = getattr(model, "backbone", model)
    preprocessor = preprocessor or getattr(model, "preprocessor", None)
    if not hasattr(backbone, "attention_scores"):
        raise TypeError(
            f"plot_attention takes a kbert task model or a kbert.BertBackbone; got {type(model).__name__}."
        )
    if preprocessor is None:
        raise ValueError(
            "plot_attention needs a preprocessor to read the text; pass "
            "preprocessor=kbert.BertPreprocessor.from_preset(...) with a bare backbone."
        )
    if not isinstance(text, str):
        raise ValueError(f"plot_attention takes one text (a str); got {type(text).__name__}.")
    _check_index("layer", layer, backbone.num_layers, "layers")
    _check_index("head", head, backbone.num_heads, "attention heads per layer")

    features = {k: np.asarray(v) for k, v in preprocessor([text]).items()}
    length = int(features["padding_mask"][0].sum())
    # Padding comes last and is masked out of attention: cutting it off
    # leaves the real tokens' attention unchanged.
    features = {k: v[:, :length] for k, v in features.items()}
    scores = backbone.attention_scores(features, layer_index=layer)
    probabilities = _numpy(keras.ops.cast(scores, "float32"))[0, head]
    tokens = [preprocessor.tokenizer.id_to_token(int(i)) for i in features["token_ids"][0]]

    size = max(4.0, 0.32 * length + 1.5)
    figure = _figure(size + 1.0, size)
    axes = figure.add_subplot()
    image = axes.imshow(probabilities, cmap="viridis", vmin=0.0, interpolation="nearest")
    figure.colorbar(image, ax=axes, shrink=0.8, label="attention probability")
    positions = np.arange(length)
    axes.set_xticks(positions, tokens, rotation=90)
    axes.set_yticks(positions, tokens)
    axes.set_xlabel("attended to (keys)")
    axes.set_ylabel("attending (queries)")
    axes.set_title(f"layer {layer % backbone.num_layers}, head {head % backbone.num_heads}")
    return _save(figure, path)


def _check_index(name, index, size, what):
    if not isinstance(index, (int, np.integer)) or not -size <= index < size:
        raise ValueError(
            f"{name}={index!r} is out of range: the backbone has {size} {what}; "
            f"pass {name}=0 to {size - 1} (or -{size} to -1, counting from the last)."
        )


def plot_history(history, path=None):
    """Training curves, one subplot per metric: `loss` with `val_loss`,
    `accuracy` with `val_accuracy`, and so on, against the epoch.

    Args:
        history: what `fit` returns (a `keras.callbacks.History`), or its
            `.history` dict of lists.
        path: where to write the PNG, if anywhere.

    Returns:
        The `matplotlib.figure.Figure`.

    Example:
    >>> history = model.fit(texts, labels, validation_data=(val_texts, val_labels), epochs=3)
    >>> kbert.plot_history(history, path="history.png")
    """
    logs = getattr(history, "history", history)
    if not isinstance(logs, dict) or not logs:
        raise ValueError(
            "plot_history takes the History that fit returns, or its .history dict of "
            f"metric name -> values per epoch; got {type(history).__name__} {logs!r:.80}."
        )
    metrics = []  # "loss", "accuracy", ... in the order fit logged them
    for key in logs:
        metric = key.removeprefix("val_")
        if metric not in metrics:
            metrics.append(metric)

    figure = _figure(4.5 * len(metrics), 3.5)
    for axes, metric in zip(figure.subplots(1, len(metrics), squeeze=False)[0], metrics):
        for key, label in ((metric, "training"), ("val_" + metric, "validation")):
            if key in logs:
                values = np.asarray(logs[key], dtype="float64")
                axes.plot(np.arange(1, len(values) + 1), values, marker="o", label=label)
        axes.set_title(metric)
        axes.set_xlabel("epoch")
        axes.xaxis.get_major_locator().set_params(integer=True)
        axes.legend()
    return _save(figure, path)


def plot_confusion_matrix(y_true, y_pred, class_names=None, path=None, normalize=False):
    """Confusion matrix: row `i`, column `j` counts the examples of class
    `i` predicted as `j`; the numbers are written in the cells.

    Args:
        y_true: the true class ids, `[examples]`.
        y_pred: the predicted class ids, `[examples]`, or the model's logits
            or probabilities `[examples, num_classes]` (their argmax is taken).
        class_names: the classes' names in id order (default: the ids, up to
            the largest one seen).
        path: where to write the PNG, if anywhere.
        normalize: divide each row by its total, so that a cell is the share
            of class `i` predicted as `j` (the diagonal is each class's recall).

    Returns:
        The `matplotlib.figure.Figure`.

    Example:
    >>> logits = model.predict(test_texts)
    >>> kbert.plot_confusion_matrix(test_labels, logits, class_names=["negative", "positive"])
    """
    y_true, y_pred = _numpy(y_true), _numpy(y_pred)
    if y_pred.ndim == 2:
        y_pred = y_pred.argmax(axis=-1)
    y_true, y_pred = y_true.reshape(-1).astype("int64"), y_pred.reshape(-1).astype("int64")
    if len(y_true) != len(y_pred):
        raise ValueError(f"Got {len(y_true)} true labels and {len(y_pred)} predictions; pass one of each per example.")
    if not len(y_true):
        raise ValueError("Got no examples; pass at least one true label and prediction.")
    num_classes = len(class_names) if class_names is not None else int(max(y_true.max(), y_pred.max())) + 1
    labels = np.concatenate([y_true, y_pred])
    if labels.min() < 0 or labels.max() >= num_classes:
        raise ValueError(
            f"Class ids must be 0 to {num_classes - 1} ({num_classes} class_names); "
            f"got ids from {labels.min()} to {labels.max()}."
        )
    matrix = np.bincount(y_true * num_classes + y_pred, minlength=num_classes**2).reshape(num_classes, num_classes)
    if normalize:
        totals = matrix.sum(axis=1, keepdims=True)
        matrix = np.divide(matrix, totals, out=np.zeros(matrix.shape), where=totals > 0)
    names = list(class_names) if class_names is not None else [str(i) for i in range(num_classes)]

    size = max(3.5, 0.6 * num_classes + 2.0)
    figure = _figure(size + 1.0, size)
    axes = figure.add_subplot()
    image = axes.imshow(matrix, cmap="Blues", vmin=0, interpolation="nearest")
    figure.colorbar(image, ax=axes, shrink=0.8, label="share of the row" if normalize else "examples")
    threshold = matrix.max() / 2
    for i in range(num_classes):
        for j in range(num_classes):
            axes.text(j, i, f"{matrix[i, j]:.2f}" if normalize else str(matrix[i, j]),
                      ha="center", va="center", color="white" if matrix[i, j] > threshold else "black")
    positions = np.arange(num_classes)
    axes.set_xticks(positions, names, rotation=45, ha="right")
    axes.set_yticks(positions, names)
    axes.set_xlabel("predicted")
    axes.set_ylabel("true")
    axes.set_title("confusion matrix" + (" (row-normalised)" if normalize else ""))
    return _save(figure, path)
