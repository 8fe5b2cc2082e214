"""BertBackbone and the task models built on it."""

from kbert.models.bert_backbone import BertBackbone
from kbert.models.bert_classifier import BertClassifier
from kbert.models.bert_masked_lm import BertMaskedLM, BertPretrainer
from kbert.models.bert_question_answerer import BertQuestionAnswerer
from kbert.models.bert_text_embedder import BertTextEmbedder
from kbert.models.bert_token_classifier import BertTokenClassifier
