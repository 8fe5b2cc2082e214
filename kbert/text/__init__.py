from kbert.text.tokenizer import BertTokenizer
from kbert.text.vocabulary import train_wordpiece_vocabulary
from kbert.text.packing import SegmentPacker, truncate_segments
from kbert.text.preprocessor import BertPreprocessor
from kbert.text.task_preprocessors import (
    BertClassifierPreprocessor,
    BertQuestionAnswererPreprocessor,
    BertTextEmbedderPreprocessor,
    BertTokenClassifierPreprocessor,
)
from kbert.text.masked_lm_preprocessor import BertMaskedLMPreprocessor, BertPretrainerPreprocessor
from kbert.text.masking import MaskedLMMaskGenerator
from kbert.text.next_sentence import next_sentence_dataset, next_sentence_pairs, read_documents
from kbert.text.sequence_packing import pack_sequences
from kbert.text.pretraining_data import pretraining_data_metadata, pretraining_dataset, write_pretraining_data
