"""The learning study: does OPD teach the unhinted student what the hinted teacher knows? Its bench
(`hermes-opd bench learning`), the closed loop it runs, its report, figure, probe and proof, the copying
student (its recipe, corpus, builder and the shipped `student_q2/`) and the bench's configs. README.md
here says what each part is and where the results are."""
