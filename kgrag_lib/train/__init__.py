"""DPO for KG-Infused RAG's knowledge-augmentation stage (§3.7, App. E): building preference
pairs with the paper's decoding settings and a judge (`dpo_data`), and training with trl's
DPOTrainer, LoRA on CPU or the paper's full fine-tune on a GPU (`dpo_train`)."""
