"""The backbone and the task models built on it, for every family.

Each class has the family-neutral name it is exported under first and the
`Bert*` name of the first releases (the same class: `kbert.aliases`)."""

from kbert.models.bert_backbone import Backbone, BertBackbone
from kbert.models.bert_classifier import BertClassifier, TextClassifier
from kbert.models.bert_masked_lm import BertMaskedLM, BertPretrainer, MaskedLM
from kbert.models.bert_question_answerer import BertQuestionAnswerer, QuestionAnswerer
from kbert.models.bert_text_embedder import BertTextEmbedder, TextEmbedder
from kbert.models.bert_token_classifier import BertTokenClassifier, TokenClassifier
from kbert.models.deberta_v2_backbone import DebertaV2Backbone
from kbert.models.modernbert_backbone import ModernBertBackbone
