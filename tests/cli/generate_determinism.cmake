# Same seed -> same output; --json prints one object with choices and stats; cascade and flat
# modes both run.
foreach(mode cascade flat)
  foreach(run 1 2)
    execute_process(
      COMMAND ${KVC} generate --prompt "The same long shared prompt for every sample. " -n 4
              --max-tokens 8 --temperature 0.9 --seed 5 --attention ${mode} --json
      OUTPUT_VARIABLE out_${mode}_${run} RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "generate --attention ${mode} failed: ${rc}")
    endif()
    string(JSON n LENGTH "${out_${mode}_${run}}" choices)
    if(NOT n EQUAL 4)
      message(FATAL_ERROR "expected 4 choices, got ${n}")
    endif()
    string(JSON steps GET "${out_${mode}_${run}}" stats num_steps)
    string(JSON text GET "${out_${mode}_${run}}" choices 0 text)
  endforeach()
  string(JSON c1 GET "${out_${mode}_1}" choices)
  string(JSON c2 GET "${out_${mode}_2}" choices)
  if(NOT c1 STREQUAL c2)
    message(FATAL_ERROR "--attention ${mode}: same seed gave different outputs")
  endif()
endforeach()
