"""JAX's differences from the `keras.ops` defaults: XLA fuses the plain
dense and dropout forms itself, so only one choice differs."""


def random_int16_is_cheap():
    # `jax.random.randint` draws two 32-bit words per element whatever the
    # dtype: 16-bit dropout masks would save nothing over Keras' dropout.
    return False
