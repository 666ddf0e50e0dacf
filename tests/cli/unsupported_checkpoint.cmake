# A checkpoint the engine does not implement stops `kvcascade generate --model DIR` (and the
# replica, which loads the same way) with exit code 2 and the field named, before any tensor is
# read: another architecture, a RoPE type, a sliding window shorter than the context, quantized
# weights other than FP8, a bias the family does not have. Run with -DKVC=<kvcascade> -DWORK=<scratch dir>.
set(base [=["hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 320, "max_position_embeddings": 8192]=])
set(cases
  "gemma|{\"architectures\": [\"Gemma2ForCausalLM\"], ${base}}|architectures: 'Gemma2ForCausalLM' is not implemented"
  "yarn|{\"architectures\": [\"Qwen3ForCausalLM\"], ${base}, \"rope_parameters\": {\"rope_type\": \"yarn\", \"rope_theta\": 1000000.0, \"factor\": 4.0}}|rope_parameters.rope_type: 'yarn' is not implemented"
  "window|{\"architectures\": [\"MistralForCausalLM\"], ${base}, \"sliding_window\": 4096}|sliding_window: 4096 is shorter than the context served"
  "awq|{\"architectures\": [\"LlamaForCausalLM\"], ${base}, \"quantization_config\": {\"quant_method\": \"awq\"}}|quantization_config.quant_method: 'awq' is not supported"
  "bias|{\"architectures\": [\"LlamaForCausalLM\"], ${base}, \"attention_bias\": true}|attention_bias: true is not implemented"
  "nothing|{${base}}|architectures: missing")
foreach(c IN LISTS cases)
  string(REPLACE "|" ";" parts "${c}")
  list(GET parts 0 name)
  list(GET parts 1 config)
  list(GET parts 2 want)
  set(dir "${WORK}/unsupported-${name}")
  file(MAKE_DIRECTORY "${dir}")
  file(WRITE "${dir}/config.json" "${config}")
  execute_process(COMMAND ${KVC} generate --model "${dir}" --prompt x --max-tokens 1
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 20)
  if(NOT rc EQUAL 2)
    message(FATAL_ERROR "${name}: exit code ${rc}, want 2 (stdout: ${out}; stderr: ${err})")
  endif()
  string(FIND "${err}" "${want}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${name}: the message does not say \"${want}\": ${err}")
  endif()
  message(STATUS "${name}: exit 2: ${err}")
endforeach()
