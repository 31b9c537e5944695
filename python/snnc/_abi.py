"""ctypes declarations of a model.so's C ABI (runtime/snn.h, ABI version 3)."""
import ctypes as C

SNN_OK = 0
SNN_MAX_RANK = 8
SNN_MAX_BATCH = 1 << 20
SNN_MAX_THREADS = 1024
ABI_VERSION = 3

STATUS = {0: "SNN_OK", 1: "SNN_ERR_ARGUMENT", 2: "SNN_ERR_DEVICE", 3: "SNN_ERR_WEIGHTS",
          4: "SNN_ERR_STATE", 5: "SNN_ERR_MEMORY", 6: "SNN_ERR_IO"}


class TensorInfo(C.Structure):
    _fields_ = [("name", C.c_char_p), ("dtype", C.c_int), ("per_step", C.c_int), ("rank", C.c_int),
                ("dims", C.c_int64 * SNN_MAX_RANK), ("numel", C.c_int64)]


class Stats(C.Structure):
    _fields_ = [("runs", C.c_int64), ("samples", C.c_int64), ("kernel_launches", C.c_int64),
                ("seconds", C.c_double), ("last_seconds", C.c_double),
                ("graph_launches", C.c_int64)]


class TrainConfig(C.Structure):
    _fields_ = [("loss", C.c_int), ("loss_output", C.c_int), ("optimizer", C.c_int),
                ("lr", C.c_double), ("momentum", C.c_double), ("weight_decay", C.c_double),
                ("beta1", C.c_double), ("beta2", C.c_double), ("eps", C.c_double),
                ("nesterov", C.c_int), ("clip_grad_norm", C.c_double),
                ("loss_on", C.c_double), ("loss_off", C.c_double)]


_P = C.c_void_p
# name: (restype, argtypes)
FUNCTIONS = {
    "snn_abi_version": (C.c_uint32, []),
    "snn_last_error": (C.c_char_p, []),
    "snn_model_get": (_P, []),
    "snn_model_name": (C.c_char_p, [_P]),
    "snn_model_timesteps": (C.c_int, [_P]),
    "snn_model_num_inputs": (C.c_int, [_P]),
    "snn_model_num_outputs": (C.c_int, [_P]),
    "snn_model_num_weights": (C.c_int, [_P]),
    "snn_model_num_layers": (C.c_int, [_P]),
    "snn_model_layer_name": (C.c_char_p, [_P, C.c_int]),
    "snn_model_input": (C.c_int, [_P, C.c_int, C.POINTER(TensorInfo)]),
    "snn_model_output": (C.c_int, [_P, C.c_int, C.POINTER(TensorInfo)]),
    "snn_model_weight": (C.c_int, [_P, C.c_int, C.POINTER(TensorInfo)]),
    "snn_model_has_weights": (C.c_int, [_P]),
    "snn_model_devices": (C.c_char_p, [_P]),
    "snn_session_create": (C.c_int, [_P, C.c_char_p, C.c_int, C.c_int, C.POINTER(_P)]),
    "snn_session_destroy": (None, [_P]),
    "snn_session_load_weights_file": (C.c_int, [_P, C.c_char_p]),
    "snn_session_load_weights": (C.c_int, [_P, C.c_void_p, C.c_size_t]),
    "snn_run": (C.c_int, [_P, C.c_int64, C.c_int, C.POINTER(_P), C.POINTER(_P)]),
    "snn_run_device": (C.c_int, [_P, C.c_int64, C.c_int, C.POINTER(_P), C.POINTER(_P)]),
    "snn_session_spike_counts": (C.c_int, [_P, C.POINTER(C.c_double), C.c_int]),
    "snn_session_stats": (C.c_int, [_P, C.POINTER(Stats)]),
    "snn_session_reset_stats": (C.c_int, [_P]),
    "snn_session_threads": (C.c_int, [_P]),
    "snn_session_device": (C.c_char_p, [_P]),
    # training (ABI 3)
    "snn_train_config_default": (None, [C.POINTER(TrainConfig)]),
    "snn_model_trainable": (C.c_int, [_P]),
    "snn_trainer_create": (C.c_int, [_P, C.POINTER(TrainConfig), C.c_int, C.c_int,
                                     C.POINTER(_P)]),
    "snn_trainer_destroy": (None, [_P]),
    "snn_train_step": (C.c_int, [_P, C.c_int64, C.c_int, C.POINTER(_P), C.c_void_p,
                                 C.POINTER(C.c_double), C.POINTER(C.c_int64)]),
    "snn_train_forward": (C.c_int, [_P, C.c_int64, C.c_int, C.POINTER(_P), C.POINTER(_P)]),
    "snn_train_backward": (C.c_int, [_P, C.POINTER(_P), C.POINTER(_P)]),
    "snn_trainer_apply": (C.c_int, [_P, C.POINTER(_P)]),
    "snn_trainer_set_lr": (C.c_int, [_P, C.c_double]),
    "snn_trainer_steps": (C.c_int64, [_P]),
    "snn_trainer_get_weight": (C.c_int, [_P, C.c_int, C.c_void_p]),
    "snn_trainer_load_weights_file": (C.c_int, [_P, C.c_char_p]),
    "snn_trainer_save_weights": (C.c_int, [_P, C.c_char_p]),
    "snn_trainer_save_checkpoint": (C.c_int, [_P, C.c_char_p]),
    "snn_trainer_load_checkpoint": (C.c_int, [_P, C.c_char_p]),
    "snn_session_copy_weights": (C.c_int, [_P, _P]),
}

# added within ABI 3: a library built before them lacks them (the calls then raise)
OPTIONAL = {
    "snn_train_backward_inputs": (C.c_int, [_P, C.POINTER(_P), C.POINTER(_P), C.POINTER(_P)]),
    "snn_trainer_set_weight": (C.c_int, [_P, C.c_int, C.c_void_p]),
    "snn_run_stream": (C.c_int, [_P, C.c_void_p, C.c_int64, C.c_int, C.POINTER(_P), C.POINTER(_P)]),
}


def bind(lib):
    """Declares every function of the ABI on a loaded library; a missing one is an error."""
    for name, (restype, argtypes) in FUNCTIONS.items():
        fn = getattr(lib, name)  # AttributeError: not a model.so of this ABI
        fn.restype = restype
        fn.argtypes = argtypes
    for name, (restype, argtypes) in OPTIONAL.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype = restype
            fn.argtypes = argtypes
    return lib
